"""What a run's window makes of each request: a success's values, a failure counted for the
error rate only, and a cut request's censored values, metric by metric."""

from __future__ import annotations

import math

from dagperf.metrics.window import WindowSample, cut_values
from dagperf.search.objectives import Objective
from dagperf.transport.protocol import CANCELLED, Cut, ErrorInfo, Result
from dagperf.verdict import Verdict

CUT_ERROR = ErrorInfo(499, CANCELLED, "Request was cancelled")


def ok(**metrics) -> Result:
    return Result(1, 0, None, 1, metrics)


def failed() -> Result:
    return Result(1, 0, None, 1, {}, ErrorInfo(500, "Internal Server Error", "no"))


def cut(waited_ms: float, stamps: tuple[float, ...] | None, isl: int = 7) -> Result:
    metrics = {"error_isl": isl}
    return Result(1, 0, None, 1, metrics, CUT_ERROR, 1, cut=Cut(waited_ms, stamps))


def told(result: Result) -> dict[str, list[tuple[float, bool]]]:
    out: dict[str, list[tuple[float, bool]]] = {}
    for name, value, exact in cut_values(result):
        out.setdefault(name, []).append((value, exact))
    return out


def test_a_request_cut_before_its_first_token_waited_at_least_that_long_for_it():
    assert told(cut(3000.0, ())) == {
        "request_latency": [(3000.0, False)],
        "output_sequence_length": [(0.0, False)],
        "input_sequence_length": [(7.0, True)],
        "time_to_first_token": [(3000.0, False)],
    }


def test_a_request_cut_mid_reply_has_its_real_first_token_and_an_open_last_gap():
    values = told(cut(1000.0, (300.0, 400.0, 550.0)))
    assert values["time_to_first_token"] == [(300.0, True)]
    assert values["time_to_second_token"] == [(100.0, True)]
    assert values["inter_chunk_latency"] == [(100.0, True), (150.0, True), (450.0, False)]
    assert values["request_latency"] == [(1000.0, False)]
    assert values["output_sequence_length"] == [(3.0, False)]
    assert "inter_token_latency" not in values  # the rest of its reply: any pace
    one = told(cut(1000.0, (300.0,)))
    assert one["time_to_second_token"] == [(700.0, False)]


def test_a_request_whose_worker_never_answered_tells_nothing():
    assert told(cut(5000.0, None)) == {}


def test_the_window_counts_cut_requests_apart_and_censors_them():
    w = WindowSample(("time_to_first_token", "inter_token_latency"))
    w.add(ok(time_to_first_token=100.0, inter_token_latency=10.0, request_latency=500.0))
    w.add(failed())
    w.add(cut(3000.0, ()))
    w.add(cut(3000.0, (2500.0,)))
    w.add(cut(3000.0, None))
    assert (w.completed, w.failed, w.cut, w.cut_waiting) == (1, 1, 3, 1)
    ttft = w.samples["time_to_first_token"]
    assert (ttft.exact.count, ttft.censored) == (2, 2)  # 100 and 2500 exact; 3000+ and 0+
    assert (ttft.lows.min, ttft.lows.max) == (0.0, 3000.0)
    itl = w.samples["inter_token_latency"]
    assert (itl.exact.count, itl.censored) == (1, 3)  # unknown for every cut request


def test_the_error_rate_objective_counts_cut_requests_as_either_outcome():
    o = Objective("error_rate", "max", 0.05)
    w = WindowSample(objectives=[o])
    for _ in range(18):
        w.add(ok(request_latency=1.0))
    w.add(failed())
    w.add(cut(10.0, ()))
    (j,) = w.judgements()
    assert (j.low, j.high) == (1 / 20, 2 / 20)  # the cut one a success, or a failure
    assert j.verdict is Verdict.UNDECIDED and "1 cut or in flight" in j.why
    w.add(ok(request_latency=1.0))
    (j,) = w.judgements()
    assert j.verdict is Verdict.UNDECIDED  # 2/21 could still be
    for _ in range(20):
        w.add(ok(request_latency=1.0))
    (j,) = w.judgements()
    assert j.verdict is Verdict.MEETS and j.high == 2 / 41


def test_a_session_objective_with_no_completed_session_is_never_met():
    o = Objective("session_duration", "p50", 60_000.0)
    w = WindowSample(objectives=[o])
    (j,) = w.judgements()
    assert j.verdict is Verdict.UNDECIDED and j.why == "nothing was measured"
    for _ in range(40):  # every session cut short after 10 s: each lasted 10 s or more
        w.add_session(10_000.0, complete=False)
    (j,) = w.judgements()
    assert j.verdict is Verdict.UNDECIDED and j.high == math.inf
    assert w.report(None, None)["sessions"] == {"completed": 0, "cut": 40}
    strict = WindowSample(objectives=[Objective("session_duration", "p50", 5_000.0)])
    for _ in range(40):
        strict.add_session(10_000.0, complete=False)
    (j,) = strict.judgements()
    assert j.verdict is Verdict.MISSES  # longer than the objective, whatever they became


def test_decided_counts_what_is_in_flight_as_unknown():
    w = WindowSample(objectives=[Objective("time_to_first_token", "p90", 1000.0)])
    for _ in range(29):
        w.add(ok(time_to_first_token=100.0))
    assert w.decided(in_flight=0, open_sessions=0)
    assert not w.decided(in_flight=1, open_sessions=0)
