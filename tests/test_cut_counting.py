"""One definition of a cut request, used everywhere a run counts: three requests (a success,
the endpoint's failure, one the run cut short) fed through the scheduler's pure parts as it
feeds them, and every count that reports them agreeing: the summary, the dispatcher's progress
and /status, the live Prometheus metrics, the records, the timeslices, the sessions, the
verdict."""

from __future__ import annotations

import json

from prometheus_client import generate_latest

from dagperf.apis.endpoint_config import EndpointConfig
from dagperf.engine import Dispatcher
from dagperf.exports.run import Artifacts, RunOutput
from dagperf.exports.timeslices import timeslices
from dagperf.graph import compile_dag_jsonl
from dagperf.metrics.live import LiveMetrics
from dagperf.scheduler.status import status_report
from dagperf.transport.protocol import CANCELLED, Cut, ErrorInfo, Result
from dagperf.verdict import rejection
from dagperf.vocabulary.config import LoadConfig
from dagperf.vocabulary.contract import RunState, Workers

from dagfile import conv, load


async def test_a_cut_request_is_counted_apart_from_errors_in_every_count(tmp_path):
    graph = compile_dag_jsonl(load(conv("ok"), conv("bad"), conv("cut")))
    dispatcher = Dispatcher(graph, LoadConfig(concurrency=3), lambda: 0.0)
    dispatcher.add_worker("w")
    dispatcher.begin()
    flights = {f.run.tree.root.conversation_id: f for f in dispatcher.orders.drain_sends()}
    live = LiveMetrics("b")
    output = RunOutput(Artifacts(tmp_path, {"load": {}}), None, live)
    output.open(graph, EndpointConfig(url="http://127.0.0.1:1", model="m"))
    results = {
        "ok": Result(flights["ok"].credit, 1_000, 1_001, 2_000, {"request_latency": 1.0}),
        "bad": Result(
            flights["bad"].credit,
            1_000,
            1_001,
            2_000,
            {"error_isl": 3},
            ErrorInfo(500, "Internal Server Error", "no"),
        ),
        "cut": Result(
            flights["cut"].credit,
            1_000,
            None,
            2_000,
            {"error_isl": 3},
            ErrorInfo(499, CANCELLED, "cancelled"),
            2_000,
            cut=Cut(1.0, ()),
        ),
    }
    for name, result in results.items():
        flight = dispatcher.complete(result.credit, result.error is None, result.cut is not None)
        assert flight is flights[name]
        output.add(flight, result, 1_000, {})
    output.retire(dispatcher.orders.drain_retired())
    await output.close()

    summary = output.summary.aggregates()
    assert (summary["request_count"], summary["error_request_count"]) == (1, 1)
    assert summary["cut_request_count"] == 1 and summary["request_error_rate"] == 50.0
    assert [e["count"] for e in output.summary.error_summary()] == [1]  # the 500 only
    progress = dispatcher.progress()
    assert (progress.completed, progress.errors, progress.cut) == (3, 1, 1)
    status = status_report(RunState.RUNNING, dispatcher, Workers(1, 1), output.summary)
    assert (status.progress.errors, status.progress.cut) == (1, 1)
    assert status.summary.error_rate == 0.5
    metrics = generate_latest(live.registry).decode()
    assert 'dagperf_requests_total{benchmark="b",outcome="cut",worker="w"} 1.0' in metrics
    assert 'dagperf_requests_total{benchmark="b",outcome="error",worker="w"} 1.0' in metrics
    assert 'error_type="RequestCancellationError"' not in metrics
    records = [json.loads(line) for line in output.artifacts.records.read_text().splitlines()]
    assert [r["metadata"]["cut"] is not None for r in records] == [False, False, True]
    (window,) = timeslices(output.artifacts.records, 1_000, 1.0)
    assert (window["error_request_count"], window["cut_request_count"]) == (1, 1)
    sessions = [json.loads(line) for line in output.artifacts.sessions.read_text().splitlines()]
    assert [(s["error_count"], s["cut_count"]) for s in sessions] == [(0, 0), (1, 0), (0, 1)]
    assert output.window.cut == 1 and output.window.failed == 1
    assert rejection(1, 1, 0.5, None, 1) is None  # 1 of 2 answered failed: 50%, not more
    assert "1 cut short by the run" in (rejection(0, 1, 0.05, None, 1) or "")
