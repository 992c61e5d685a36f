"""The dagperf Kubernetes operator (kopf): Benchmark resources to scheduler and worker pods.

What it reads of the runtime, and nothing else (`tests/test_project.py` holds its imports to
this list, import-linter's contract keeps the engine, the roles and the wire out): the shared
vocabulary, the table of APIs and of dataset formats, a dataset's loading and the load it can
run (to refuse a Benchmark before a pod starts), the run's options models (whose fields its
spec's sections are, and whose flags its pods' command lines are), a search's objectives and
its load rules, and the verdict's default.
"""

RUNTIME_SURFACE = (
    "dagperf.vocabulary",
    "dagperf.apis",
    "dagperf.dataset",
    "dagperf.sources",
    "dagperf.graph",
    "dagperf.fetch",
    "dagperf.load",
    "dagperf.options",
    "dagperf.health.report",
    "dagperf.search.objectives",
    "dagperf.search.plan",
    "dagperf.verdict",
)
