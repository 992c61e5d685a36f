"""Health checks of a finished run, on crafted artifact directories and on a real run."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from dagperf.health import (
    REPORT_FILE,
    HealthError,
    HealthOptions,
    HealthReport,
    Status,
    check_artifacts,
    health_command,
    render,
)
from dagperf.health.checks import CHECKS, Arrivals, Record, Roots, Run
from dagperf.health.checks.root_sessions import _overlap

from dagfile import conv, encode, turn, user

T0 = 1_790_000_000_000_000_000  # ns; every crafted time is in ms from here
ERRORS, ARRIVAL, CONCURRENCY, RATE, OSL, EARLY = (
    "request_errors",
    "intra_session_arrival",
    "session_concurrency",
    "request_rate",
    "output_length",
    "early_stop",
)


def rid(name: str) -> str:
    """A request or correlation id as the engine writes them: a uuid (stable per name)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, name))


def ns(ms: float) -> int:
    return T0 + round(ms * 1_000_000)


def record(
    name: str,
    start: float,
    end: float,
    *,
    root: str = "root",
    session: str | None = None,
    deps: tuple[str, ...] = (),
    delay_ms: float = 0.0,
    max_tokens: int | None = None,
    ignore_eos: bool = False,
    osl: float | None = 16,
    error: bool = False,
    ack: bool = True,
    cancelled: bool = False,
    turns: int | None = None,
    dependents: int | None = None,
    finish: str | None = None,
    cut: bool = False,
    ids=rid,
) -> dict[str, Any]:
    """One profile_export.jsonl line; `session` defaults to the root's own conversation."""
    correlation = ids(session or root)
    metrics = {} if osl is None else {"output_sequence_length": {"value": osl, "unit": "tokens"}}
    return {
        "metadata": {
            "x_request_id": ids(name),
            "x_correlation_id": correlation,
            "root_correlation_id": ids(root),
            "conversation_id": session or root,
            "turn_index": 0,
            "turn_count": turns,
            "request_start_ns": ns(start),
            "request_ack_ns": ns(start + 1) if ack else None,
            "request_end_ns": ns(end),
            "was_cancelled": cancelled,
            "agent_depth": 0 if session is None else 1,
            "branch_mode": None if session is None else "fork",
            "depends_on": [ids(d) for d in deps],
            "delay_ms": delay_ms,
            "dependents": dependents,
            "max_tokens": max_tokens,
            "ignore_eos": ignore_eos,
            "token_count_source": "usage",
            "finish_reason": finish,
            "cut": {"waited_ms": end - start, "first_token": False} if cut else None,
        },
        "metrics": metrics,
        "error": {"code": 499, "type": "RequestCancellationError", "message": "cut"}
        if cut
        else {"code": 500, "type": "ServerError", "message": "boom"}
        if error
        else None,
    }


def write_run(
    directory: Path, records: list[dict[str, Any]], max_error_rate: float | None = None,
    **load: Any,
) -> Path:  # fmt: skip
    """An artifact directory with the two files the checks read."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "profile_export.jsonl").open("w") as f:
        for line in records:
            f.write(json.dumps(line) + "\n")
    config = {"concurrency": None, "request_rate": None, "fixed_schedule": False} | load
    inputs = {"load": config, "workers": 1}
    if max_error_rate is not None:
        inputs["max_error_rate"] = max_error_rate
    summary = {"input_config": inputs, "request_count": {"avg": 1}}
    (directory / "profile_export_aiperf.json").write_text(json.dumps(summary, indent=2))
    return directory


def check(tmp_path: Path, records: list[dict[str, Any]], options=None, **load: Any):
    return check_artifacts(write_run(tmp_path / "run", records, **load), options)


def tree(n: int, at: float, lateness: float = 1.0) -> list[dict[str, Any]]:
    """Root n starting at `at` ms: turn 0 (3 ms), then a FORK child and turn 1 (after a 1 ms
    delay), each sent `lateness` ms after it was due; the child an ignore_eos request answered
    within tolerance."""
    root = f"root{n}"
    child, second = at + 3 + lateness, at + 3 + 1 + lateness
    return [
        record(f"{root}:0", at, at + 3, root=root, turns=2, dependents=2),
        record(
            f"{root}/child",
            child,
            child + 3,
            root=root,
            session=f"{root}/child",
            deps=(f"{root}:0",),
            max_tokens=100,
            ignore_eos=True,
            osl=98,
            turns=1,
            dependents=0,
        ),
        record(
            f"{root}:1",
            second,
            second + 1,
            root=root,
            deps=(f"{root}:0",),
            delay_ms=1,
            turns=2,
            dependents=0,
        ),
    ]


def good_run(roots: int = 1000, rate: float = 100.0) -> list[dict[str, Any]]:
    gap = 1000 / rate
    return [line for n in range(roots) for line in tree(n, n * gap)]


# --- a good run -------------------------------------------------------------------------------


def test_a_good_run_passes_every_check(tmp_path):
    report = check(tmp_path, good_run(), concurrency=2, request_rate=100.0)

    assert report.passed
    assert [(c.name, c.status) for c in report.checks] == [
        (ERRORS, Status.PASS),
        (ARRIVAL, Status.PASS),
        (CONCURRENCY, Status.PASS),
        (RATE, Status.PASS),
        (OSL, Status.PASS),
        (EARLY, Status.SKIPPED),  # no reply said why it ended
    ]
    assert report.records == 3000
    arrival = report.check(ARRIVAL).details
    assert (arrival["dependent_requests"], arrival["early"], arrival["late"]) == (2000, 0, 0)
    assert arrival["lateness_ms"] == {
        "count": 2000,
        "min": 1.0,
        "p50": 1.0,
        "p90": 1.0,
        "p99": 1.0,
        "max": 1.0,
    }
    assert arrival["worst"] == [] and arrival["missing_dependencies"] == 0
    concurrency = report.check(CONCURRENCY).details
    assert (concurrency["max_observed"], concurrency["target"], concurrency["roots"]) == (
        1,
        2,
        1000,
    )
    assert report.check(RATE).details["measured_per_s"] == pytest.approx(100.0)
    assert report.check(OSL).details["checked"] == 1000


def test_each_check_is_reported_under_its_entry_in_the_table(tmp_path):
    """The report holds one verdict per entry of CHECKS, in its order and under its key, and
    the console shows each by the entry's title."""
    report = check(tmp_path, good_run(roots=3), concurrency=2)
    assert [c.name for c in report.checks] == list(CHECKS)
    shown = render(report).splitlines()[1:-1]
    assert [line.split("  ")[2].strip() for line in shown] == [c.title for c in CHECKS.values()]


# --- intra-session arrival --------------------------------------------------------------------


def test_a_child_sent_before_its_parent_ended_fails(tmp_path):
    records = [*tree(0, 0), *tree(1, 100, lateness=-2.0)]
    report = check(tmp_path, records)

    result = report.check(ARRIVAL)
    assert result.status is Status.FAIL and not report.passed
    assert (result.details["early"], result.details["late"]) == (2, 0)
    assert result.details["lateness_ms"]["min"] == -2.0
    assert result.details["worst"] == [
        {"request_id": rid("root1/child"), "lateness_ms": -2.0},
        {"request_id": rid("root1:1"), "lateness_ms": -2.0},
    ]
    assert "2 sent early" in result.summary and rid("root1/child") in result.summary


def test_a_child_sent_before_its_delay_elapsed_fails(tmp_path):
    records = [
        record("t0", 0, 10),
        record("t1", 15, 20, deps=("t0",), delay_ms=10),  # due at 20 ms, sent at 15
    ]
    result = check(tmp_path, records).check(ARRIVAL)
    assert result.status is Status.FAIL
    assert result.details["worst"] == [{"request_id": rid("t1"), "lateness_ms": -5.0}]


def test_a_child_later_than_the_slack_fails(tmp_path):
    records = [*tree(0, 0), *tree(1, 1000, lateness=80.0)]
    result = check(tmp_path, records).check(ARRIVAL)

    assert result.status is Status.FAIL
    assert (result.details["early"], result.details["late"]) == (0, 2)
    assert result.details["lateness_ms"]["max"] == 80.0
    assert result.details["worst"][0]["lateness_ms"] == 80.0
    assert "later than 50 ms" in result.summary

    relaxed = HealthOptions(arrival_slack_ms=100)
    assert check(tmp_path, records, relaxed).check(ARRIVAL).status is Status.PASS


def test_a_join_is_due_after_the_last_of_its_dependencies(tmp_path):
    records = [
        record("t0", 0, 10),
        record("a", 10.5, 30, session="a", deps=("t0",)),
        record("b", 10.5, 50, session="b", deps=("t0",)),
        record("t1", 52, 60, deps=("a", "b")),  # 2 ms after b; 22 ms after a
    ]
    result = check(tmp_path, records).check(ARRIVAL)
    assert result.status is Status.PASS
    assert result.details["lateness_ms"]["max"] == 2.0


def test_a_child_read_before_its_parent_is_still_timed(tmp_path):
    records = [record("t1", 9, 20, deps=("t0",)), record("t0", 0, 10)]
    result = check(tmp_path, records).check(ARRIVAL)
    assert result.status is Status.FAIL
    assert result.details["worst"] == [{"request_id": rid("t1"), "lateness_ms": -1.0}]


def test_a_missing_dependency_is_counted_not_fatal(tmp_path):
    records = [
        *tree(0, 0),
        record("orphan", 50, 60, root="root9", deps=("warmup-parent",)),
    ]
    result = check(tmp_path, records).check(ARRIVAL)

    assert result.status is Status.PASS
    details = result.details
    assert (details["missing_dependencies"], details["unverifiable_requests"]) == (1, 1)
    assert details["dependent_requests"] == 2
    assert "1 dependencies not in the file" in result.summary


def test_only_unverifiable_children_skip_the_arrival_check(tmp_path):
    records = [record("t0", 0, 10), record("orphan", 5, 6, deps=("gone", "also-gone"))]
    result = check(tmp_path, records).check(ARRIVAL)
    assert result.status is Status.SKIPPED
    assert result.details["missing_dependencies"] == 2
    assert "2 missing dependencies" in result.summary


def test_failures_without_a_response_are_not_timed(tmp_path):
    """A lost worker's record carries the credit's issue time as its start."""
    records = [
        record("t0", 0, 10),
        record("t1", 1, 11, deps=("t0",), error=True, ack=False),
        record("t2", 11, 12, deps=("t0",), error=True),  # answered with an error: timed
    ]
    result = check(tmp_path, records).check(ARRIVAL)
    assert result.status is Status.PASS
    assert result.details["failed_without_response"] == 1
    assert result.details["dependent_requests"] == 1


def test_no_dependencies_skips_the_arrival_check(tmp_path):
    result = check(tmp_path, [record("t0", 0, 10)]).check(ARRIVAL)
    assert result.status is Status.SKIPPED
    assert result.summary == "no request depends on another"


def test_ids_that_are_not_uuids_work_too(tmp_path):
    same = str
    records = [
        record("p", 0, 10, ids=same),
        record("c", 9, 12, session="c", deps=("p",), ids=same),
    ]
    result = check(tmp_path, records).check(ARRIVAL)
    assert result.details["worst"] == [{"request_id": "c", "lateness_ms": -1.0}]


def test_clock_skew_between_hosts_can_be_forgiven(tmp_path):
    records = [record("t0", 0, 10), record("t1", 9.5, 11, deps=("t0",))]
    assert check(tmp_path, records).check(ARRIVAL).status is Status.FAIL
    skewed = HealthOptions(early_tolerance_ms=1)
    assert check(tmp_path, records, skewed).check(ARRIVAL).status is Status.PASS


# --- session concurrency ----------------------------------------------------------------------


def three_overlapping_roots() -> list[dict[str, Any]]:
    return [
        record("a:0", 0, 10, root="a"),
        record("a:1", 10.5, 40, root="a", deps=("a:0",)),  # a's span runs to 40 ms
        record("b:0", 5, 30, root="b"),
        record("c:0", 20, 50, root="c"),  # a, b and c open from 20 to 30 ms
        record("c/child", 50.5, 200, root="c", session="c/child", deps=("c:0",)),
    ]


def test_three_overlapping_roots_fail_concurrency_two(tmp_path):
    result = check(tmp_path, three_overlapping_roots(), concurrency=2).check(CONCURRENCY)
    assert result.status is Status.FAIL
    assert result.details == {
        "target": 2,
        "target_source": "concurrency",
        "roots": 3,
        "max_observed": 3,
        "peak_at_ms": 20.0,
        "time_over_target_ms": 10.0,
    }
    assert result.summary.startswith("3 root sessions overlapped (limit 2)")


def test_children_outliving_their_root_do_not_hold_its_slot(tmp_path):
    records = [
        record("a:0", 0, 10, root="a"),
        record("a/child", 10.5, 100, root="a", session="a/child", deps=("a:0",)),
        record("b:0", 11, 20, root="b"),
    ]
    result = check(tmp_path, records, concurrency=1).check(CONCURRENCY)
    assert result.status is Status.PASS
    assert result.details["max_observed"] == 1


def test_a_root_starting_as_another_ends_does_not_overlap_it(tmp_path):
    records = [record("a:0", 0, 10, root="a"), record("b:0", 10, 20, root="b")]
    result = check(tmp_path, records, concurrency=1).check(CONCURRENCY)
    assert result.status is Status.PASS


def brute_overlap(spans: list[tuple[int, int]], target: int) -> tuple[int, int, int]:
    """The sweep by definition: open at t = spans with start <= t < end, evaluated at every
    instant where that can change, in integer nanoseconds."""
    times = sorted({t for span in spans for t in span})
    open_at = [sum(s <= t < e for s, e in spans) for t in times]
    peak = max(open_at)
    over = sum(b - a for a, b, n in zip(times, times[1:], open_at, strict=False) if n > target)
    return peak, times[open_at.index(peak)], over


@pytest.mark.parametrize("seed", range(40))
def test_the_overlap_sweep_agrees_with_its_definition(seed):
    rng = random.Random(seed)
    spans = []
    for _ in range(rng.randint(1, 30)):
        start = rng.randint(0, 40)  # a small range: many ties, zero-length spans
        spans.append((start, start + rng.choice([0, 0, 1, 3, rng.randint(0, 30)])))
    target = rng.randint(1, 6)
    starts = np.array([s for s, _ in spans], dtype=np.int64)
    ends = np.array([e for _, e in spans], dtype=np.int64)
    peak, at, over = _overlap(starts, ends, target)
    expected_peak, expected_at, expected_over = brute_overlap(spans, target)
    assert (peak, over) == (expected_peak, expected_over)
    if peak:  # with nothing ever open, no instant is the peak's
        assert at == expected_at


def test_memory_follows_what_is_in_flight_not_the_run(tmp_path):
    """With the counts the engine writes, a request's end is dropped once its dependents are
    read and a root closes with its last turn; a file without them keeps everything to the
    end (older versions). Both give the same verdicts."""
    lines = good_run(roots=2000)
    older = [
        {**line, "metadata": {**line["metadata"], "turn_count": None, "dependents": None}}
        for line in lines
    ]
    kept = {}
    for name, run in (("current", lines), ("older", older)):
        arrivals, roots = Arrivals(Run()), Roots(Run())
        most = 0
        for line in run:
            record = msgspec.convert(line, Record)
            arrivals.add(record)
            roots.add(record)
            most = max(most, arrivals.retained + roots.retained)
        kept[name] = most
    assert kept == {"current": 2, "older": 4 * 2000}  # ends of 3 records, 1 root, per tree

    current = check(tmp_path / "current", lines, concurrency=2, request_rate=100.0)
    old = check(tmp_path / "older", older, concurrency=2, request_rate=100.0)
    assert [c.details for c in current.checks] == [c.details for c in old.checks]
    assert current.passed


def test_without_a_limit_the_engine_default_of_one_applies(tmp_path):
    result = check(tmp_path, three_overlapping_roots()).check(CONCURRENCY)
    assert result.status is Status.FAIL
    assert (result.details["target"], result.details["target_source"]) == (1, "default")


def test_rate_or_schedule_without_a_limit_skips_concurrency(tmp_path):
    records = three_overlapping_roots()
    for load in ({"request_rate": 5.0}, {"fixed_schedule": True}):
        result = check(tmp_path, records, **load).check(CONCURRENCY)
        assert result.status is Status.SKIPPED


# --- request rate -----------------------------------------------------------------------------


def test_a_rate_thirty_percent_low_fails(tmp_path):
    report = check(tmp_path, good_run(roots=1000, rate=70.0), request_rate=100.0)
    result = report.check(RATE)
    assert result.status is Status.FAIL
    assert result.details["measured_per_s"] == pytest.approx(70.0)
    assert result.details["relative_error"] == pytest.approx(-0.3)
    assert result.details["arrivals"] == 1000
    assert "-30.0%" in result.summary


def test_too_few_arrivals_skip_the_rate_check_with_the_figure(tmp_path):
    result = check(tmp_path, good_run(roots=50, rate=70.0), request_rate=100.0).check(RATE)
    assert result.status is Status.SKIPPED
    assert result.details["measured_per_s"] == pytest.approx(70.0)
    assert result.details["arrivals_needed"] == 900
    assert "needs 900 arrivals" in result.summary
    # A wider tolerance needs fewer arrivals: 3/sqrt(100) fits within 35%.
    loose = HealthOptions(rate_tolerance=0.35)
    relaxed = check(tmp_path, good_run(roots=100, rate=70.0), loose, request_rate=100.0)
    assert relaxed.check(RATE).status is Status.PASS


def test_burstier_arrivals_need_more_of_them_for_a_verdict(tmp_path):
    """Gamma gaps with cv 2 make the measured rate four times as noisy: 1,000 arrivals decide
    a Poisson run but not this one, which needs 3,600."""
    run = good_run(roots=1000, rate=70.0)
    assert check(tmp_path, run, request_rate=100.0).check(RATE).status is Status.FAIL
    bursty = check(tmp_path, run, request_rate=100.0, arrival_cv=2.0).check(RATE)
    assert bursty.status is Status.SKIPPED
    assert bursty.details["arrivals_needed"] == 3600
    assert "the noise of gaps with cv 2 needs 3600 arrivals" in bursty.summary


def test_not_a_rate_run_skips_the_rate_check(tmp_path):
    result = check(tmp_path, good_run(roots=3)).check(RATE)
    assert result.status is Status.SKIPPED
    assert "not a rate run" in result.summary


# --- output length ----------------------------------------------------------------------------


def eos(name: str, max_tokens: int | None, osl: float | None, **fields: Any) -> dict[str, Any]:
    return record(name, 0, 1, root=name, max_tokens=max_tokens, ignore_eos=True, osl=osl, **fields)


def test_a_short_ignore_eos_reply_fails(tmp_path):
    records = [eos("ok", 100, 100), eos("short", 100, 60), eos("a-bit-short", 100, 94)]
    result = check(tmp_path, records).check(OSL)
    assert result.status is Status.FAIL
    assert (result.details["checked"], result.details["failed"]) == (3, 2)
    assert result.details["worst"] == [
        {"request_id": rid("short"), "max_tokens": 100, "output_tokens": 60, "why": "ignore_eos"},
        {"request_id": rid("a-bit-short"), "max_tokens": 100, "output_tokens": 94,
         "why": "ignore_eos"},
    ]  # fmt: skip
    assert f"worst {rid('short')}: 60 tokens for 100" in result.summary


def test_the_tolerance_is_five_percent_capped_at_fifty_tokens(tmp_path):
    def status(max_tokens: int, osl: int) -> Status:
        return check(tmp_path, [eos("r", max_tokens, osl)]).check(OSL).status

    assert status(1000, 950) is Status.PASS  # 5% = 50
    assert status(1000, 1050) is Status.PASS
    assert status(1000, 949) is Status.FAIL
    assert status(4000, 3950) is Status.PASS  # 5% = 200, capped at 50
    assert status(4000, 3949) is Status.FAIL
    assert status(10, 10) is Status.PASS  # 5% = 0.5: only exact
    assert status(10, 9) is Status.FAIL


def test_output_length_only_checks_successful_ignore_eos_requests(tmp_path):
    records = [
        eos("failed", 100, None, error=True),
        eos("cancelled", 100, 3, cancelled=True),
        eos("no-cap", None, 3),
        record("natural", 0, 1, max_tokens=100, osl=3),
    ]
    result = check(tmp_path, records).check(OSL)
    assert result.status is Status.SKIPPED
    assert result.details["checked"] == 0


def test_a_successful_reply_without_a_length_fails(tmp_path):
    result = check(tmp_path, [eos("r", 100, None)]).check(OSL)
    assert result.status is Status.FAIL
    assert result.details["worst"][0]["output_tokens"] is None


def test_without_ignore_eos_replies_that_ended_at_the_limit_are_judged_on_their_usage(tmp_path):
    """A server that refuses ignore_eos: a reply whose finish_reason is "length" must be
    max_tokens long by the server's own count; one that stopped by itself is an early stop,
    reported apart (a warning: the run still passes)."""
    records = [
        record("at-limit", 0, 1, max_tokens=100, osl=100, finish="length"),
        record("miscounted", 0, 1, max_tokens=100, osl=70, finish="length"),
        record("early", 0, 1, max_tokens=100, osl=30, finish="stop"),
    ]
    report = check(tmp_path, records)
    lengths = report.check(OSL)
    assert lengths.status is Status.FAIL
    assert (lengths.details["checked"], lengths.details["ended_at_max_tokens"]) == (2, 2)
    assert lengths.details["worst"] == [{"request_id": rid("miscounted"), "max_tokens": 100,
                                         "output_tokens": 70, "why": "length"}]  # fmt: skip
    assert "2 ended at the limit" in lengths.summary
    early = report.check(EARLY)
    assert early.status is Status.WARN
    assert early.details["early_stops"] == 1 and early.details["replies_with_finish_reason"] == 3
    assert "1 of 3 replies ended by themselves" in early.summary and "median 30%" in early.summary
    fine = check(tmp_path, records[:1] + records[2:])
    assert fine.passed and fine.check(OSL).status is Status.PASS
    assert "WARN  early stops" in render(fine) and "1 warned" in render(fine)


def test_the_endpoint_s_errors_fail_the_health_past_the_run_s_max_error_rate(tmp_path):
    """Three failures in 40 answered: 7.5%, over the default 5% and within a run's 10%; the
    requests the run cut short count for neither side."""
    records = [record(f"ok{i}", 0, 1) for i in range(37)]
    records += [record(f"bad{i}", 0, 1, error=True) for i in range(3)]
    records += [record(f"cut{i}", 0, 1, cut=True) for i in range(30)]
    errors = check(tmp_path, records).check(ERRORS)
    assert errors.status is Status.FAIL
    assert errors.summary.startswith("3 of 40 requests failed (7.5%), more than --max-error-rate")
    assert "ServerError 500: boom" in errors.summary
    assert errors.details == {"succeeded": 37, "failed": 3, "cut": 30, "max_error_rate": 0.05}
    lenient = check_artifacts(write_run(tmp_path / "lenient", records, max_error_rate=0.1))
    assert lenient.check(ERRORS).status is Status.PASS
    assert "30 cut short by the run, not errors" in lenient.check(ERRORS).summary
    only_cut = check(tmp_path, [record("c", 0, 1, cut=True)]).check(ERRORS)
    assert only_cut.status is Status.SKIPPED  # it waited at least so long: nothing to judge
    lost = record("lost", 0, 1, cut=True)
    lost["metadata"]["cut"]["first_token"] = None  # lost with its worker: nothing seen of it
    only_lost = check(tmp_path, [lost]).check(ERRORS)
    assert only_lost.status is Status.FAIL  # measured nothing: no "Health: passed"
    assert only_lost.summary.startswith("nothing was measured: all 1 requests were lost")


# --- files, report, command -------------------------------------------------------------------


def test_unreadable_artifacts_raise_health_error_naming_the_file(tmp_path):
    with pytest.raises(HealthError, match="not a directory"):
        check_artifacts(tmp_path / "nowhere")

    run = write_run(tmp_path / "run", good_run(roots=2))
    (run / "profile_export.jsonl").unlink()
    with pytest.raises(HealthError, match=r"profile_export\.jsonl: not found"):
        check_artifacts(run)

    run = write_run(tmp_path / "run2", good_run(roots=2))
    (run / "profile_export_aiperf.json").unlink()
    with pytest.raises(HealthError, match=r"profile_export_aiperf\.json: not found"):
        check_artifacts(run)


def test_a_corrupt_records_line_is_named(tmp_path):
    run = write_run(tmp_path / "run", good_run(roots=1))
    with (run / "profile_export.jsonl").open("a") as f:
        f.write('{"metadata": {"x_request_id": "x", "request_start_ns": 1, \n')
    with pytest.raises(HealthError) as caught:
        check_artifacts(run)
    assert str(caught.value).startswith(f"{run / 'profile_export.jsonl'}:4: invalid JSON")

    (run / "profile_export.jsonl").write_text('{"metrics": {}}\n')
    with pytest.raises(HealthError, match=r"profile_export\.jsonl:1: not a request record: .*"):
        check_artifacts(run)

    (run / "profile_export.jsonl").write_bytes(b"\n\xff\xfe\x00garbage\n")
    with pytest.raises(HealthError, match=r"profile_export\.jsonl:2: invalid JSON"):
        check_artifacts(run)


def test_a_corrupt_summary_is_named_with_its_line(tmp_path):
    run = write_run(tmp_path / "run", good_run(roots=1))
    (run / "profile_export_aiperf.json").write_text('{\n  "input_config": {\n    oops\n')
    with pytest.raises(HealthError, match=r"profile_export_aiperf\.json:3: invalid JSON"):
        check_artifacts(run)

    (run / "profile_export_aiperf.json").write_text('{"request_count": {}}')
    with pytest.raises(HealthError, match=r"no dagperf_config\.load"):
        check_artifacts(run)

    (run / "profile_export_aiperf.json").write_text(
        '{"input_config": {"load": {"concurrency": "x"}}}'
    )
    with pytest.raises(HealthError, match=r"dagperf_config\.load: .*concurrency"):
        check_artifacts(run)


def test_other_load_fields_and_older_records_still_read(tmp_path):
    """A directory from another version: unknown load fields, records without the newer ones."""
    lines = good_run(roots=2)
    for line in lines:
        for name in ("max_tokens", "ignore_eos", "token_count_source", "depends_on", "delay_ms"):
            del line["metadata"][name]
    report = check(tmp_path, lines, concurrency=1, some_future_knob=3)
    assert report.passed
    assert report.check(ARRIVAL).status is Status.SKIPPED


def test_an_empty_run_skips_every_check(tmp_path):
    report = check(tmp_path, [], concurrency=4, request_rate=10.0)
    assert report.records == 0 and report.passed
    assert {c.status for c in report.checks} == {Status.SKIPPED}


def test_health_command_prints_writes_and_returns_the_verdict(tmp_path):
    good = write_run(tmp_path / "good", good_run(roots=3), concurrency=1)
    out, err = io.StringIO(), io.StringIO()
    assert health_command(str(good), HealthOptions(), out, err) == 0
    assert err.getvalue() == ""
    lines = out.getvalue().splitlines()
    assert lines[0] == f"Health checks: 9 records in {good}"
    assert [line.split()[0] for line in lines[1:7]] == ["PASS", "PASS", "PASS", "SKIP", "PASS",
                                                         "SKIP"]  # fmt: skip
    assert lines[1] == "  PASS  endpoint errors        0 of 9 requests failed (0.0%), within " + (
        "--max-error-rate 0.05")  # fmt: skip
    assert lines[2].startswith("  PASS  intra-session arrival  6 dependent requests on time")
    assert lines[7] == "Health: passed (4 passed, 0 failed, 2 skipped)"
    assert lines[8] == f"Health report: {good / REPORT_FILE}"

    document = json.loads((good / REPORT_FILE).read_text())
    assert list(document) == [
        "schema_version",
        "passed",
        "artifact_dir",
        "records",
        "options",
        "checks",
    ]
    assert document["passed"] is True and document["schema_version"] == 1
    assert document["options"] == HealthOptions().model_dump()
    assert [c["name"] for c in document["checks"]] == [ERRORS, ARRIVAL, CONCURRENCY, RATE, OSL,
                                                        EARLY]  # fmt: skip
    assert set(document["checks"][0]) == {"name", "status", "summary", "details"}
    rebuilt = HealthReport.model_validate(
        {k: v for k, v in document.items() if k not in ("schema_version", "passed")}
    )
    assert render(rebuilt) == "\n".join(lines[:8])

    bad = write_run(tmp_path / "bad", three_overlapping_roots(), concurrency=2)
    out = io.StringIO()
    assert health_command(str(bad), None, out, io.StringIO()) == 1
    assert "  FAIL  session concurrency" in out.getvalue()
    assert "Health: failed: session concurrency (2 passed, 1 failed, 3 skipped)" in out.getvalue()
    assert json.loads((bad / REPORT_FILE).read_text())["passed"] is False

    out, err = io.StringIO(), io.StringIO()
    assert health_command(str(tmp_path / "missing"), None, out, err) == 2
    assert out.getvalue() == ""
    assert err.getvalue() == f"dagperf health: {tmp_path / 'missing'}: not a directory\n"


def test_health_command_uses_the_process_streams_by_default(tmp_path, capsys):
    run = write_run(tmp_path / "run", good_run(roots=1))
    (run / "profile_export.jsonl").write_text("nope\n")
    assert health_command(str(run)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "profile_export.jsonl:1: invalid JSON" in captured.err
    assert "Traceback" not in captured.err


# --- a real run -------------------------------------------------------------------------------


def test_a_real_run_passes(tmp_path):
    """`dagperf profile` against its built-in simulator: turns with a delay, background FORK
    children, SPAWN children joined by their parent, two roots at a time, ignore_eos replies."""
    dataset = tmp_path / "health.dag.jsonl"

    def bg(child: str) -> dict[str, Any]:
        return {"child": child, "background": True}

    lines = []
    for r in range(3):
        lines += [
            conv(
                f"root{r}",
                turn(messages=[user("plan")], forks=[bg(f"f{r}a"), bg(f"f{r}b")], spawns=[f"s{r}"]),
                turn(messages=[user("join")], delay=20.0),
                turn(messages=[user("wrap up")]),
            ),
            conv(f"f{r}a", turn(messages=[user("a")]), turn(messages=[user("a2")], delay=5.0)),
            conv(f"f{r}b", turn(messages=[user("b")])),
            conv(f"s{r}", turn(messages=[user("sub-agent")])),
        ]
    dataset.write_bytes(b"".join(encode(*lines)))
    directory = tmp_path / "artifacts"
    command = [sys.executable, "-m", "dagperf", "profile", "--input-file", str(dataset)]
    command += ["--custom-dataset-type", "dag_jsonl", "--artifact-dir", str(directory)]
    command += ["--concurrency", "2", "--num-conversations", "6", "--quiet"]
    command += ["--extra-inputs", "max_tokens:12", "--extra-inputs", "ignore_eos:true"]
    command += ["--sim-ttft-ms", "2", "--sim-itl-ms", "0.5"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr

    # How late a dependent request may go out is a timing claim, which belongs to a benchmark:
    # a slack a loaded machine keeps, far below the 5 s and 20 s delays a run could skip (a
    # request sent before its delay ended fails the check whatever the slack).
    report = check_artifacts(directory, HealthOptions(arrival_slack_ms=2_000))
    assert report.passed, render(report)
    assert report.records == 6 * 7
    statuses = {c.name: c.status for c in report.checks}
    assert statuses == {
        ERRORS: Status.PASS,
        ARRIVAL: Status.PASS,
        CONCURRENCY: Status.PASS,
        RATE: Status.SKIPPED,
        OSL: Status.PASS,
        EARLY: Status.PASS,  # every reply ended at max_tokens (finish_reason length)
    }
    assert report.check(ARRIVAL).details["dependent_requests"] == 6 * 6
    assert report.check(CONCURRENCY).details["max_observed"] == 2
    assert report.check(OSL).details["checked"] == 6 * 7

    # The counts that bound the check's memory are the run's own: every request named in as
    # many depends_on as its `dependents`, every conversation with `turn_count` records.
    metas = [
        json.loads(line)["metadata"]
        for line in (directory / "profile_export.jsonl").read_text().splitlines()
    ]
    named = Counter(d for meta in metas for d in meta["depends_on"])
    assert [meta["dependents"] for meta in metas] == [named[m["x_request_id"]] for m in metas]
    # per root, named: turn 0 by both forks' first turns, the spawn and turn 1; fork a's first
    # turn by its second; the spawn by the join (turn 1); turn 1 by turn 2
    assert sum(meta["dependents"] for meta in metas) == 6 * 7
    turns = Counter(meta["x_correlation_id"] for meta in metas)
    assert [meta["turn_count"] for meta in metas] == [turns[m["x_correlation_id"]] for m in metas]


def test_the_health_commands_tolerance_flags_reach_their_checks(tmp_path):
    """Each request of this run goes out 1 ms late and each ignore_eos reply is 2 tokens short:
    fine by the defaults, failures once the flags tighten the slack and the cap."""
    directory = write_run(tmp_path / "run", good_run(roots=300), concurrency=2, request_rate=100.0)
    command = [sys.executable, "-m", "dagperf", "health", str(directory)]
    assert subprocess.run(command, capture_output=True, timeout=60).returncode == 0
    flags = {
        "arrival_slack_ms": 0.5, "early_tolerance_ms": 2.0, "rate_tolerance": 0.5,
        "osl_tolerance_pct": 3.0, "osl_tolerance_max_tokens": 1,
    }  # fmt: skip
    command += [f"--{k.replace('_', '-')}={v}" for k, v in flags.items()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads((directory / "health_check.json").read_text())
    assert report["options"] == flags
    checks = {c["name"]: c for c in report["checks"]}
    assert checks[ARRIVAL]["status"] == Status.FAIL
    assert checks[ARRIVAL]["details"]["slack_ms"] == 0.5
    assert checks[ARRIVAL]["details"]["early_tolerance_ms"] == 2.0
    assert checks[OSL]["status"] == Status.FAIL
    assert checks[RATE]["details"]["tolerance"] == 0.5
