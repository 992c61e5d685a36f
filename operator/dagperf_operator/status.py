"""A Benchmark's status, computed by pure functions from what the operator observed.

Conditions keep the usual shape (type, status, reason, message, lastTransitionTime) and keep
their transition time while their status stays the same. While the scheduler runs, its /status
gives progress, workers and a metrics summary; when its pod ends, the termination message it
wrote (its final report; both are typed in dagperf.vocabulary.contract) gives the final word,
and the pod's own state (exit code, OOMKilled, a failed init container, an eviction) explains a
failure the scheduler could not report itself.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, NamedTuple

import msgspec

from dagperf.vocabulary.contract import FinalReport, RunState, StatusReport, decode_final

FIRST_ERRORS = 5  # dataset problems quoted in the DatasetValid condition


class Phase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


ACTIVE = (Phase.PENDING, Phase.RUNNING)
TERMINAL_PHASES = (Phase.SUCCEEDED, Phase.FAILED, Phase.SUSPENDED)


class Condition(StrEnum):
    DATASET_VALID = "DatasetValid"
    RESOURCES_CREATED = "ResourcesCreated"
    WORKERS_READY = "WorkersReady"
    COMPLETED = "Completed"
    SPEC_ACCEPTED = "SpecAccepted"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def expired(completion_time: str | None, ttl_seconds: int, now: datetime) -> bool:
    """Whether a Benchmark that finished at `completion_time` (an API timestamp,
    `2026-01-02T03:04:05Z`) has outlived its ttlSecondsAfterFinished at `now`."""
    if not completion_time:
        return False
    finished = datetime.fromisoformat(completion_time.replace("Z", "+00:00"))
    return (now - finished).total_seconds() >= ttl_seconds


def set_condition(
    conditions: list[dict[str, Any]], type_: str, status: bool, reason: str, message: str = ""
) -> list[dict[str, Any]]:
    """The conditions with one set; its transition time changes only when its status does."""
    value = "True" if status else "False"
    old = next((c for c in conditions if c.get("type") == type_), None)
    kept = old is not None and old.get("status") == value
    new = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": old["lastTransitionTime"] if old is not None and kept else now(),
    }
    return [c for c in conditions if c.get("type") != type_] + [new]


def dataset_problems_message(problems: list[str]) -> str:
    shown = problems[:FIRST_ERRORS]
    more = len(problems) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def display(completed: int, total: int | None) -> str:
    return f"{completed}/{total}" if total else str(completed)


def from_scheduler(report: StatusReport | FinalReport) -> dict[str, Any]:
    """Status fields from a scheduler's /status or its final report."""
    progress = report.progress
    out: dict[str, Any] = {
        "progress": {
            "requestsCompleted": progress.requests_completed,
            "requestsTotal": progress.requests_total,
            "errors": progress.errors,
            "cut": progress.cut,
            "display": display(progress.requests_completed, progress.requests_total),
        }
    }
    if isinstance(report, StatusReport):
        out["workers"] = msgspec.to_builtins(report.workers)
    if report.branch_stats:
        out["branchStats"] = report.branch_stats
    if isinstance(report, FinalReport) and report.search is not None:
        out["search"] = msgspec.to_builtins(report.search)
    summary = msgspec.to_builtins(report.summary)  # the figures known so far
    if summary:
        out["summary"] = summary
    return out


class End(NamedTuple):
    """How a run ended: its Benchmark's phase, why, and the scheduler's report if it wrote one."""

    phase: Phase
    reason: str
    message: str
    final: FinalReport | None = None


def finished(pod: dict[str, Any] | None, job: dict[str, Any] | None) -> End | None:
    """How the run ended, once the scheduler's pod (or its Job) says it did; None meanwhile."""
    if (failed := _pod_failed(pod)) is not None:
        return failed
    terminated = _terminated(pod)
    if terminated is None:
        job_failed = any(
            c.get("type") == "Failed" and c.get("status") == "True"
            for c in ((job or {}).get("status") or {}).get("conditions") or []
        )
        if job_failed:
            return End(
                Phase.FAILED,
                "SchedulerFailed",
                "the scheduler Job failed before its pod reported",
                None,
            )
        return None
    final = decode_final(terminated.get("message"))
    code = terminated.get("exitCode")
    if final is not None and final.outcome is RunState.SUCCEEDED and code == 0:
        return End(Phase.SUCCEEDED, "Completed", "the run completed", final)
    if final is not None and final.outcome is RunState.STOPPED and code == 0:
        return End(Phase.SUSPENDED, "Suspended", "stopped on request; partial results kept", final)
    reason = terminated.get("reason") or "Error"
    if reason == "OOMKilled":
        message = "the scheduler ran out of memory (OOMKilled); raise spec.scheduler.resources"
    elif final is not None and final.reason:
        message = f"the run {final.outcome}: {final.reason}"
    else:
        detail = (terminated.get("message") or "").strip()[:500]
        message = f"the scheduler exited with code {code}" + (f": {detail}" if detail else "")
    return End(Phase.FAILED, reason if reason != "Completed" else "Error", message, final)


def _terminated(pod: dict[str, Any] | None) -> dict[str, Any] | None:
    for container in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if container.get("name") == "scheduler":
            return (container.get("state") or {}).get("terminated")
    return None


def _pod_failed(pod: dict[str, Any] | None) -> End | None:
    """A failure of the pod rather than of the scheduler: an init container that failed (its
    termination message is its last words: the fetch-dataset container's one line on what went
    wrong), or the pod's eviction (an emptyDir over its sizeLimit, say)."""
    status = (pod or {}).get("status") or {}
    for container in status.get("initContainerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated") or {}
        code = terminated.get("exitCode")
        if code:
            detail = (terminated.get("message") or "").strip()[:500]
            name = container.get("name")
            message = f"init container {name} exited with code {code}" + (
                f": {detail}" if detail else ""
            )
            return End(Phase.FAILED, "InitContainerFailed", message)
    if status.get("reason") == "Evicted":
        detail = (status.get("message") or "").strip()[:500]
        return End(Phase.FAILED, "Evicted", f"the scheduler pod was evicted: {detail}")
    return None
