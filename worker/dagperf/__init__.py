"""dagperf: benchmark OpenAI-compatible LLM endpoints with DAG-shaped conversation workloads."""

import os

# A benchmark's own processes must not keep a core busy of their own accord, which is measured
# as their load and taken from the endpoint's. numpy's OpenBLAS starts a thread per core when
# imported; after each vector operation it hands out, that thread spins for a while before it
# sleeps. One dot product per heartbeat kept one spinning through the scheduler's whole run (a
# quarter of the CPU per request). dagperf's numpy work is small: one thread does it. Set here,
# before anything of dagperf imports numpy; a value the user set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"
