"""Where a run's files go: its artifact directory (named, or a default no earlier run used),
checked writable before anything starts, and the HTML report written into it at the end."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dagperf.cli.run_options import RunOptions
from dagperf.fetch import shown
from dagperf.options import DatasetOptions
from dagperf.vocabulary.config import LoadConfig


def artifact_dir_for(options: RunOptions, load: LoadConfig) -> Path:
    """--artifact-dir, said when it already holds files (they are overwritten, as AIPerf's
    are: the user named it); else a default of its own that no earlier run used."""
    if options.output.artifact_dir is not None:
        named = options.output.artifact_dir
        if _holds_files(named):
            print(
                f"dagperf: {named} already holds files (--artifact-dir); this run's files "
                "replace those of the same names",
                file=sys.stderr,
            )
        return named
    if load.request_rate:
        shape = f"rate{load.request_rate:g}"
    elif load.fixed_schedule:
        shape = "schedule" + (f"-concurrency{load.concurrency}" if load.concurrency else "")
    else:
        shape = f"concurrency{load.root_limit}"
    return unused_default(options.dataset, f"{options.endpoint.endpoint_type}-{shape}")


def unused_default(dataset: DatasetOptions, kind: str) -> Path:
    """artifacts/<dataset>-<kind>, or with the first numeric suffix (-2, -3, ...) that no
    earlier run has used: a second run never writes over the first's default directory."""
    named = dataset.session_config or dataset.input_file or "run"
    name = Path(shown(named)).name.split(".")[0]
    first = Path("artifacts") / f"{name}-{kind}"
    directory, number = first, 1
    while _holds_files(directory):
        number += 1
        directory = first.with_name(f"{first.name}-{number}")
    if directory != first:
        print(
            f"dagperf: {first} holds an earlier run; this one goes to {directory} "
            "(--artifact-dir DIR to choose)",
            file=sys.stderr,
        )
    return directory


def _holds_files(directory: Path) -> bool:
    try:
        return any(directory.iterdir())
    except OSError:  # not there (or not a directory: ensure_writable says so)
        return False


def ensure_writable(parser: argparse.ArgumentParser, directory: Path) -> None:
    """Create the artifact directory and write in it now, before a process starts or a
    request is sent: a run whose results cannot be kept should not begin."""
    probe = directory / f".dagperf-probe-{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        parser.error(f"--artifact-dir: cannot write to {directory}: {e.strerror or e}")


def write_html_report(run_dirs: list[Path], output: Path | None = None) -> None:
    """The run's report.html; a report that cannot be written is said, and the run's verdict
    stands (its exports are already written)."""
    from dagperf.report import ReportError, write_report

    try:
        print(f"Report: {write_report(run_dirs, output)}")
    except ReportError as e:
        print(f"dagperf: no report: {e}", file=sys.stderr)


def write_runs_report(runs: Path, pattern: str, output: Path) -> None:
    """A comparison of the finished runs in `runs` whose directory names match `pattern`."""
    done = sorted(p.parent for p in runs.glob(f"{pattern}/profile_export_aiperf.json"))
    if done:
        output.mkdir(parents=True, exist_ok=True)
        write_html_report(done, output)
