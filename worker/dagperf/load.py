"""The load a run puts on its endpoint: its LoadConfig resolved against the graph it runs.

One decision for every way in: `dagperf profile`, `dagperf scheduler` and `dagperf search`
resolve their flags' load here, and the operator's preflight resolves a Benchmark's load
against its dataset before any pod starts, so a load the CLI would refuse is refused there with
the same message. What is decided: the stop condition when none is given, whether roots follow
the dataset's timestamps, and whether a failure cancels its session. How many roots run at once
is `LoadConfig.root_limit`'s rule.
"""

from __future__ import annotations

from dagperf.graph import RequestGraph
from dagperf.vocabulary.config import LoadConfig


class LoadError(ValueError):
    """A load the graph cannot run; the message names the CLI's flags."""


def timed(graph: RequestGraph) -> bool:
    """Every root has a start time: the dataset can run on its own schedule."""
    return all(tree.start_s is not None for tree in graph.trees)


def resolve_load(load: LoadConfig, graph: RequestGraph) -> LoadConfig:
    """The load as it runs on `graph`; a LoadError when it cannot."""
    return _cancel(_schedule(_stop(load, graph), graph), graph)


def _stop(load: LoadConfig, graph: RequestGraph) -> LoadConfig:
    """Without a request count, a conversation count or a duration: each root once."""
    if load.request_count or load.num_conversations or load.benchmark_duration:
        return load
    return load.model_copy(update={"num_conversations": graph.root_count})


def _schedule(load: LoadConfig, graph: RequestGraph) -> LoadConfig:
    """A timed dataset runs on its schedule unless a concurrency or rate is asked for (or
    --no-fixed-schedule); --fixed-schedule on a dataset without times cannot run."""
    if load.fixed_schedule is None:
        auto = timed(graph) and not load.concurrency and not load.request_rate
        return load.model_copy(update={"fixed_schedule": auto})
    if load.fixed_schedule and not timed(graph):
        raise LoadError("--fixed-schedule needs a start time for every session (trace timestamps)")
    return load


def _cancel(load: LoadConfig, graph: RequestGraph) -> LoadConfig:
    """--[no-]cancel-session-on-failure, or else what the session config says, or else off."""
    if load.cancel_session_on_failure is not None:
        return load
    return load.model_copy(
        update={"cancel_session_on_failure": bool(graph.cancel_session_on_failure)}
    )
