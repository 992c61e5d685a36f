"""Health checks of a finished run, computed from its artifact directory alone.

A benchmark's numbers mean something only if the endpoint answered (its failures within the
run's --max-error-rate; requests the run cut short are not failures) and the load went out as
asked: children after their dependencies (plus their delay, and not much later), no more root
sessions at once than the concurrency, roots arriving at the requested rate, and replies as long
as asked (`ignore_eos` ones, and those that ended at `max_tokens`; replies that stopped by
themselves before it are reported apart).
These checks read only `profile_export.jsonl` and `profile_export_aiperf.json`, so they run the
same after a local run, on a results volume from a cluster, or on an old directory; they need no
engine state, and the engine needs no hook for them (each record carries `depends_on` and
`delay_ms`: the export is a DAG that can be checked on its own). The price is that only what the
files say can be checked: a request whose record is missing (a warmup-phase parent) leaves its
children unverifiable, which is counted and reported rather than fatal.

Here: reading the two files (one streaming pass over the records, every problem a `HealthError`
naming the file and line), the console rendering and the entry points. `checks` holds the
checks, fed one record at a time, and their table; `report` the models of their options and
verdicts.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import msgspec

from dagperf.exports.files import whole_or_nothing
from dagperf.health.report import (
    CheckResult,
    HealthError,
    HealthOptions,
    HealthReport,
    Status,
)
from dagperf.verdict import DEFAULT_MAX_ERROR_RATE

__all__ = [
    "REPORT_FILE",
    "CheckResult",
    "HealthError",
    "HealthOptions",
    "HealthReport",
    "Status",
    "check_artifacts",
    "health_command",
    "render",
    "write_report",
]

RECORDS_FILE = "profile_export.jsonl"
SUMMARY_FILE = "profile_export_aiperf.json"
REPORT_FILE = "health_check.json"


if TYPE_CHECKING:  # the checks (and numpy) load when a run is checked, not with every CLI
    from dagperf.health.checks.run import Load, Record


def _read_load(path: Path) -> tuple[Load, float]:
    """The run's load, and the --max-error-rate it was judged on."""
    from dagperf.health.checks.run import Load

    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise HealthError(f"{path}: not found (did the run finish writing its exports?)") from None
    except OSError as e:
        raise HealthError(f"{path}: cannot read: {e.strerror}") from None
    try:
        document = json.loads(raw)
    except json.JSONDecodeError as e:
        raise HealthError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
    except ValueError as e:  # not UTF-8
        raise HealthError(f"{path}: not a JSON text: {e}") from None
    # dagperf's own configuration; runs written before it moved there kept it in input_config
    found = (
        [document.get(k) for k in ("dagperf_config", "input_config")]
        if isinstance(document, dict)
        else []
    )
    config = next((c for c in found if isinstance(c, dict) and "load" in c), None)
    load = None if config is None else config["load"]
    if not isinstance(load, dict):
        raise HealthError(f"{path}: no dagperf_config.load object (not a dagperf summary?)")
    limit = config.get("max_error_rate") if config else None
    if isinstance(limit, bool) or not isinstance(limit, int | float) or not 0 <= limit <= 1:
        limit = DEFAULT_MAX_ERROR_RATE  # a run written before it was recorded
    try:
        return msgspec.convert(load, Load), float(limit)
    except msgspec.ValidationError as e:
        raise HealthError(f"{path}: dagperf_config.load: {e}") from None


def _read_records(path: Path) -> Iterator[Record]:
    from dagperf.health.checks.run import Record

    decode = msgspec.json.Decoder(Record).decode
    try:
        file = path.open("rb")
    except FileNotFoundError:
        raise HealthError(f"{path}: not found (did the run finish writing its exports?)") from None
    except OSError as e:
        raise HealthError(f"{path}: cannot read: {e.strerror}") from None
    with file:
        for number, line in enumerate(file, 1):
            if line.isspace():
                continue
            try:
                yield decode(line)
            except msgspec.ValidationError as e:
                raise HealthError(f"{path}:{number}: not a request record: {e}") from None
            except msgspec.DecodeError as e:
                raise HealthError(f"{path}:{number}: invalid JSON: {e}") from None


def check_artifacts(artifact_dir: Path, options: HealthOptions | None = None) -> HealthReport:
    """Run every check on a run's artifact directory; HealthError when it cannot be read."""
    from dagperf.health.checks import run_checks
    from dagperf.health.checks.run import Run

    options = options or HealthOptions()
    artifact_dir = Path(artifact_dir)
    if not artifact_dir.is_dir():
        raise HealthError(f"{artifact_dir}: not a directory")
    load, max_error_rate = _read_load(artifact_dir / SUMMARY_FILE)
    records = _read_records(artifact_dir / RECORDS_FILE)
    count, checks = run_checks(records, Run(options, load, max_error_rate))
    return HealthReport(
        artifact_dir=str(artifact_dir), records=count, options=options, checks=checks
    )


_LABELS = {Status.PASS: "PASS", Status.FAIL: "FAIL", Status.WARN: "WARN", Status.SKIPPED: "SKIP"}


def render(report: HealthReport) -> str:
    """A short console block: one line per check, then the verdict."""
    from dagperf.health.checks import CHECKS

    known = {name: check.title for name, check in CHECKS.items()}
    titles = [known.get(check.name, check.name) for check in report.checks]
    width = max(map(len, titles), default=0)
    lines = [f"Health checks: {report.records} records in {report.artifact_dir}"]
    for title, check in zip(titles, report.checks, strict=True):
        lines.append(f"  {_LABELS[check.status]}  {title:<{width}}  {check.summary}")
    counts = {status: 0 for status in Status}
    for check in report.checks:
        counts[check.status] += 1
    tally = f"{counts[Status.PASS]} passed, {counts[Status.FAIL]} failed, "
    tally += f"{counts[Status.WARN]} warned, " if counts[Status.WARN] else ""
    tally += f"{counts[Status.SKIPPED]} skipped"
    if report.passed:
        lines.append(f"Health: passed ({tally})")
    else:
        failed = [known.get(c.name, c.name) for c in report.checks if c.status is Status.FAIL]
        lines.append(f"Health: failed: {', '.join(failed)} ({tally})")
    return "\n".join(lines)


def write_report(report: HealthReport, artifact_dir: Path) -> Path:
    """Write `health_check.json` (whole or not at all) and return its path."""
    path = Path(artifact_dir) / REPORT_FILE
    with whole_or_nothing(path) as f:
        f.write(json.dumps(report.to_json(), indent=2) + "\n")
    return path


def health_command(
    artifact_dir: str,
    options: HealthOptions | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`dagperf health DIR`: print the checks and write health_check.json. Returns 0 when
    every check passed or was skipped, 1 when one failed, 2 when the artifacts (or the report
    file) could not be read or written."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        report = check_artifacts(Path(artifact_dir), options)
    except HealthError as e:
        print(f"dagperf health: {e}", file=err)
        return 2
    print(render(report), file=out)
    try:
        path = write_report(report, Path(artifact_dir))
    except OSError as e:
        print(f"dagperf health: cannot write {REPORT_FILE}: {e}", file=err)
        return 2
    print(f"Health report: {path}", file=out)
    return 0 if report.passed else 1
