"""How a run ended, and the final report the operator reads from `--summary-file`."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagperf.engine import Dispatcher
from dagperf.engine.window import Window
from dagperf.exports.run import RunOutput
from dagperf.verdict import rejection, unmeasured
from dagperf.vocabulary.contract import FinalReport, RunState, StatusReport

log = logging.getLogger("dagperf.scheduler")


@dataclass
class Outcome:
    """How a run ended and what it measured."""

    document: dict[str, Any]
    failure: str | None
    stop_reason: str | None
    interrupted: bool
    stopped: bool = False  # interrupted on request (POST /stop), which is not a failure
    rejected: str | None = None  # why the endpoint failed the run (see dagperf.verdict)

    @property
    def state(self) -> RunState:
        if self.failure is not None or self.rejected is not None:
            return RunState.FAILED
        if self.stopped:
            return RunState.STOPPED
        return RunState.CANCELLED if self.interrupted else RunState.SUCCEEDED

    @property
    def reason(self) -> str | None:
        return self.failure or self.rejected or self.stop_reason


def write_final_report(
    path: Path,
    outcome: Outcome,
    status: StatusReport,
    benchmark: str,
    duration_s: float,
    results: Path,
) -> None:
    """The final report, within the termination message's limit; a failure to write it is
    logged, since the run's own files are already written."""
    final = FinalReport(
        outcome=outcome.state,
        reason=outcome.reason,
        benchmark=benchmark,
        progress=status.progress,
        duration_seconds=round(duration_s, 3),
        summary=status.summary,
        branch_stats=status.branch_stats,
        results_path=str(results),
    )
    try:
        path.write_bytes(final.compact())
    except OSError as e:
        log.error("cannot write the summary file %s: %s", path, e)


def _wall_ns(window: Window) -> tuple[int | None, int | None]:
    """When the window opened and closed (at the run's end, if nothing closed it), as epoch
    nanoseconds like the records' times."""
    now_s, now_ns = time.monotonic(), time.time_ns()

    def wall(t: float | None) -> int | None:
        return None if t is None else now_ns - round((now_s - t) * 1e9)

    return wall(window.level_at), wall(window.closed_at if window.closed_at is not None else now_s)


def conclude(
    dispatcher: Dispatcher,
    output: RunOutput,
    interrupted: bool,
    stopped: bool,
    max_error_rate: float,
) -> Outcome:
    """Write the run's summary files and judge it: a run cut short is not judged on its
    errors (see `dagperf.verdict`)."""
    cut_short = interrupted or stopped
    document, write_failure = output.write_summary(
        dispatcher.branch_stats.as_dict(),
        complete=dispatcher.finished and dispatcher.failure is None and not cut_short,
        cancelled=cut_short or dispatcher.failure is not None,
        window_ns=_wall_ns(dispatcher.window),
    )
    summary = output.summary
    failure = dispatcher.failure or write_failure
    if failure is None and not cut_short:
        failure = unmeasured(summary.ok, summary.error_count, summary.cut, summary.unseen)
    outcome = Outcome(document, failure, dispatcher.closed_reason, interrupted, stopped)
    if failure is None and not cut_short:
        outcome.rejected = rejection(
            summary.ok,
            summary.error_count,
            max_error_rate,
            summary.most_common_error(),
            summary.cut,
        )
    return outcome
