"""The scheduler-to-operator contract (dagperf.vocabulary.contract): what the scheduler writes is
what the operator reads, it fits a termination message, and every field the operator copies into a
Benchmark's status is one the CRD keeps (a real API server prunes any other, silently)."""

from __future__ import annotations

import dataclasses

import msgspec
import yaml

from dagperf.engine.branch_stats import BranchStats
from dagperf.vocabulary.contract import (
    SUMMARY_LIMIT,
    FinalReport,
    MetricsSummary,
    Progress,
    RunState,
    StatusReport,
    Workers,
    decode_final,
    decode_status,
)
from dagperf_operator import status as st

from emulator import CRD_FILE

BRANCH_STATS = {f.name: n for n, f in enumerate(dataclasses.fields(BranchStats), 1)}
SUMMARY = MetricsSummary(request_throughput=12.5, ttft_p50_ms=20.1, ttft_p99_ms=25.3,
                         itl_p50_ms=5.0, itl_p99_ms=5.2, error_rate=0.01)  # fmt: skip
PROGRESS = Progress(requests_completed=5, requests_total=9, errors=1, requests_sent=6, in_flight=1)


def final(**changes) -> FinalReport:
    report = FinalReport(
        outcome=RunState.SUCCEEDED, reason=None, progress=PROGRESS, summary=SUMMARY,
        benchmark="demo", duration_seconds=1.5, branch_stats=BRANCH_STATS,
        results_path="/results/demo",
    )  # fmt: skip
    return msgspec.structs.replace(report, **changes)


def running(workers: Workers) -> StatusReport:
    return StatusReport(
        state=RunState.RUNNING, phase="profiling", workers=workers, progress=PROGRESS,
        branch_stats=BRANCH_STATS, summary=SUMMARY,
    )  # fmt: skip


def test_reports_read_back_as_written():
    status = running(Workers(2, 2))
    assert decode_status(msgspec.json.encode(status)) == status
    assert decode_final(final().compact().decode()) == final()


def test_a_final_report_too_big_for_a_termination_message_keeps_its_outcome_and_progress():
    huge = final(reason="x" * 10_000, branch_stats={f"k{n}": n for n in range(500)},
                 results_path="/results/" + "d" * 5000)  # fmt: skip
    text = huge.compact()
    assert len(text) <= SUMMARY_LIMIT
    read = decode_final(text.decode())
    assert read is not None
    assert (read.outcome, read.progress, read.summary) == (RunState.SUCCEEDED, PROGRESS, SUMMARY)
    assert read.reason == "x" * 200 + "..."


def test_what_is_not_a_final_report_reads_as_none():
    for message in (None, "", "Traceback (most recent call last):", "{}", '{"outcome": "won"}'):
        assert decode_final(message) is None, message
    assert decode_status(b"<html>") is None


def test_every_field_the_operator_copies_is_one_the_crd_keeps():
    crd = yaml.safe_load(CRD_FILE.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    status = running(Workers(2, 1))
    for copied in (st.from_scheduler(status), st.from_scheduler(final())):
        assert _pruned(copied, schema) == [], "the API server would drop these"
    assert set(st.from_scheduler(status)) == {"progress", "workers", "branchStats", "summary"}


def _pruned(value, schema, path="status") -> list[str]:
    """The paths of `value` that a structural schema does not declare."""
    if not isinstance(value, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    properties = schema.get("properties")
    if properties is None:
        extra = schema.get("additionalProperties")
        return [] if extra else [path]
    missing = []
    for key, item in value.items():
        if key not in properties:
            missing.append(f"{path}.{key}")
        else:
            missing += _pruned(item, properties[key], f"{path}.{key}")
    return missing
