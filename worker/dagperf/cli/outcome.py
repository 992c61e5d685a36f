"""How a run's outcome becomes what the user sees and its exit code: the summary, the health
checks and the report, then the verdict (`dagperf.verdict`'s codes)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from dagperf import verdict
from dagperf.cli.artifacts import write_html_report
from dagperf.health import HealthOptions, health_command


def report_outcome(
    outcome: Any, console: Any, artifact_dir: Path, health: HealthOptions, report: bool = False
) -> int:
    console.summary(outcome.document, str(artifact_dir))
    if (artifact_dir / "profile_export_aiperf.json").exists():  # not when the disk was full
        # The verdict is printed and exported; the exit code stays the run's own.
        health_command(str(artifact_dir), health)
        if report:
            write_html_report([artifact_dir])
    if outcome.failure:
        print(f"dagperf: the run failed: {outcome.failure}", file=sys.stderr)
        return verdict.RUN_FAILED
    if outcome.interrupted:
        return verdict.SIGNALLED
    if outcome.rejected:
        print(f"dagperf: the endpoint failed the run: {outcome.rejected}", file=sys.stderr)
        return verdict.ENDPOINT_FAILED
    return verdict.OK
