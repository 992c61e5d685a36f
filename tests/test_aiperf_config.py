"""`input_config` in AIPerf's shape (its 0.13 BenchmarkConfig: models, endpoint, datasets,
phases, slos), from dagperf's configuration. The shapes below were checked with AIPerf 0.13's
own export model (`JsonExportData.model_validate`) on this machine; bench/aiperf_export_check.py
checks any run directory the same way where AIPerf is installed."""

from __future__ import annotations

from dagperf.exports.aiperf_config import aiperf_input_config

ENDPOINT = {"url": "http://127.0.0.1:8000", "endpoint_type": "messages", "endpoint": None,
            "model": "m", "streaming": True, "api_key": "<redacted>"}  # fmt: skip


def config(load: dict, dataset: dict | None = None, **more) -> dict:
    dataset = dataset or {"path": "d.jsonl", "type": "dag_jsonl"}
    return {"dataset": dataset, "load": load, "endpoint": ENDPOINT, **more}


def test_a_rate_with_a_warmup_and_objectives():
    load = {"request_rate": 3.5, "concurrency": 8, "warmup_request_count": 5,
            "request_count": 100}  # fmt: skip
    out = aiperf_input_config(config(load, goodput={"time_to_first_token": 200.0}))
    assert out == {
        "models": ["m"],
        "endpoint": {"urls": ["http://127.0.0.1:8000"], "type": "messages", "streaming": True},
        "datasets": [{"name": "default", "type": "file", "path": "d.jsonl", "format": "dag_jsonl"}],
        "phases": [
            {"name": "warmup", "type": "poisson", "rate": 3.5, "concurrency": 8, "requests": 5},
            {"name": "profiling", "type": "poisson", "rate": 3.5, "concurrency": 8,
             "requests": 100},
        ],
        "slos": {"time_to_first_token": 200.0},
    }  # fmt: skip


def test_schedules_durations_and_datasets_aiperf_lacks():
    timed = {"path": "t.jsonl", "type": "timed_synthetic_session"}
    out = aiperf_input_config(config({"fixed_schedule": True, "benchmark_duration": 30}, timed))
    assert out["phases"] == [{"name": "profiling", "type": "fixed_schedule", "duration": 30}]
    assert out["datasets"] == [{"name": "default", "type": "file", "path": "t.jsonl"}]
    synthetic = aiperf_input_config(config({}, {"path": "s.yaml", "type": "synthetic"}))
    assert synthetic["datasets"] == [{"name": "default", "type": "synthetic"}]
    assert synthetic["phases"] == [{"name": "profiling", "type": "concurrency", "concurrency": 1}]
