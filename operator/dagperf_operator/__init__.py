"""The dagperf Kubernetes operator (kopf): Benchmark resources to scheduler and worker pods."""
