"""A run's configuration in AIPerf's shape, for the `input_config` of the summary exports.

AIPerf's tools (its export model, `aiperf plot`) read `input_config` as their own benchmark
configuration (AIPerf 0.13: models, endpoint, datasets, phases, slos); dagperf writes its run
in those terms there, and its own configuration, which says more, under `dagperf_config`.
A dataset format AIPerf does not know is given as a file without a format; a session config
(synthetic sessions) as a synthetic dataset.
"""

from __future__ import annotations

from typing import Any

from dagperf.vocabulary.config import root_limit

AIPERF_FORMATS = {"dag_jsonl", "mooncake_trace"}  # dagperf's dataset types AIPerf reads too


def aiperf_input_config(config: dict[str, Any]) -> dict[str, Any]:
    """`config` is dagperf's input configuration (dataset, load, endpoint, goodput, ...)."""
    endpoint = config.get("endpoint") or {}
    out: dict[str, Any] = {
        "models": [endpoint["model"]] if endpoint.get("model") else [],
        "endpoint": {
            "urls": [endpoint["url"]] if endpoint.get("url") else [],
            "type": endpoint.get("endpoint_type", "chat"),
            "streaming": bool(endpoint.get("streaming")),
        },
        "datasets": [_dataset(config.get("dataset") or {})],
        "phases": _phases(config.get("load") or {}),
    }
    if endpoint.get("endpoint"):
        out["endpoint"]["path"] = endpoint["endpoint"]
    if config.get("goodput"):
        out["slos"] = dict(config["goodput"])
    return out


def _dataset(dataset: dict[str, Any]) -> dict[str, Any]:
    kind = dataset.get("type")
    if kind == "synthetic":
        return {"name": "default", "type": "synthetic"}
    out = {"name": "default", "type": "file", "path": dataset.get("path")}
    if kind in AIPERF_FORMATS:
        out["format"] = kind
    return out


def _phases(load: dict[str, Any]) -> list[dict[str, Any]]:
    fixed, rate = load.get("fixed_schedule"), load.get("request_rate")
    limit = root_limit(load.get("concurrency"), rate, fixed)
    shape: dict[str, Any]
    if fixed:
        shape = {"type": "fixed_schedule"}
    elif rate:
        shape = {"type": "poisson", "rate": rate}
    else:
        shape = {"type": "concurrency"}
    if limit is not None:  # what capped the roots in flight, whichever way they arrived
        shape["concurrency"] = limit
    profiling = {"name": "profiling", **shape}
    for ours, theirs in (
        ("request_count", "requests"),
        ("num_conversations", "sessions"),
        ("benchmark_duration", "duration"),
    ):
        if load.get(ours):
            profiling[theirs] = load[ours]
    phases = [profiling]
    if load.get("warmup_request_count"):
        warmup = {"name": "warmup", **shape, "requests": load["warmup_request_count"]}
        phases.insert(0, warmup)
    return phases
