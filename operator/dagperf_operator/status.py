"""A Benchmark's status, computed by pure functions from what the operator observed.

Conditions keep the usual shape (type, status, reason, message, lastTransitionTime) and keep
their transition time while their status stays the same. While the scheduler runs, its /status
gives progress, workers and a metrics summary; when its pod ends, the termination message it
wrote (compact JSON, see dagperf.status) gives the final word, and the pod's own state (exit
code, OOMKilled) explains a failure the scheduler could not report itself.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

TERMINAL_PHASES = ("Succeeded", "Failed", "Suspended")
FIRST_ERRORS = 5  # dataset problems quoted in the DatasetValid condition


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: list[dict[str, Any]], type_: str, status: bool, reason: str, message: str = ""
) -> list[dict[str, Any]]:
    """The conditions with one set; its transition time changes only when its status does."""
    value = "True" if status else "False"
    old = next((c for c in conditions if c.get("type") == type_), None)
    moved = old is None or old.get("status") != value
    new = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now() if moved else old["lastTransitionTime"],
    }
    return [c for c in conditions if c.get("type") != type_] + [new]


def dataset_problems_message(problems: list[str]) -> str:
    shown = problems[:FIRST_ERRORS]
    more = len(problems) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def display(completed: int, total: int | None) -> str:
    return f"{completed}/{total}" if total else str(completed)


def from_scheduler(report: dict[str, Any]) -> dict[str, Any]:
    """Status fields from a scheduler's /status (or the progress part of its final summary)."""
    progress = report.get("progress") or {}
    completed = int(progress.get("requestsCompleted") or 0)
    total = progress.get("requestsTotal")
    out: dict[str, Any] = {
        "progress": {
            "requestsCompleted": completed,
            "requestsTotal": total,
            "errors": int(progress.get("errors") or 0),
            "display": display(completed, total),
        }
    }
    if "workers" in report:
        out["workers"] = report["workers"]
    if report.get("branchStats"):
        out["branchStats"] = report["branchStats"]
    if report.get("summary"):
        out["summary"] = {k: v for k, v in report["summary"].items() if v is not None}
    return out


def parse_termination(message: str | None) -> dict[str, Any] | None:
    """The scheduler's final summary, if its termination message holds one."""
    if not message:
        return None
    try:
        value = json.loads(message)
    except ValueError:
        return None
    return value if isinstance(value, dict) and "outcome" in value else None


def finished(pod: dict[str, Any] | None, job: dict[str, Any] | None) -> dict[str, Any] | None:
    """How the run ended, once the scheduler's pod (or its Job) says it did; None meanwhile.

    Returns {phase, reason, message, final}, `final` being the parsed summary when there is one.
    """
    terminated = _terminated(pod)
    if terminated is None:
        job_failed = any(
            c.get("type") == "Failed" and c.get("status") == "True"
            for c in ((job or {}).get("status") or {}).get("conditions") or []
        )
        if job_failed:
            return {
                "phase": "Failed",
                "reason": "SchedulerFailed",
                "message": "the scheduler Job failed before its pod reported",
                "final": None,
            }
        return None
    final = parse_termination(terminated.get("message"))
    code = terminated.get("exitCode")
    if final is not None and final["outcome"] == "succeeded" and code == 0:
        return {
            "phase": "Succeeded",
            "reason": "Completed",
            "message": "the run completed",
            "final": final,
        }
    if final is not None and final["outcome"] == "stopped" and code == 0:
        return {
            "phase": "Suspended",
            "reason": "Suspended",
            "message": "stopped on request; partial results kept",
            "final": final,
        }
    reason = terminated.get("reason") or "Error"
    if reason == "OOMKilled":
        message = "the scheduler ran out of memory (OOMKilled); raise spec.scheduler.resources"
    elif final is not None and final.get("reason"):
        message = f"the run {final['outcome']}: {final['reason']}"
    else:
        detail = (terminated.get("message") or "").strip()[:500]
        message = f"the scheduler exited with code {code}" + (f": {detail}" if detail else "")
    return {
        "phase": "Failed",
        "reason": reason if reason != "Completed" else "Error",
        "message": message,
        "final": final,
    }


def _terminated(pod: dict[str, Any] | None) -> dict[str, Any] | None:
    for container in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if container.get("name") == "scheduler":
            return (container.get("state") or {}).get("terminated")
    return None
