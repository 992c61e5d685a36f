"""dagperf: benchmark OpenAI-compatible LLM endpoints with DAG-shaped conversation workloads."""

__version__ = "0.1.0"
