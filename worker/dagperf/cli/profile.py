"""`dagperf profile`: a benchmark on this machine (the scheduler here, worker processes and,
without --url, the built-in simulator), once or --num-profile-runs times."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import TYPE_CHECKING

from dagperf import verdict
from dagperf.cli.artifacts import write_runs_report
from dagperf.cli.flags import Commands
from dagperf.cli.local_run import checked, local_flags, local_plan
from dagperf.cli.outcome import report_outcome
from dagperf.runtime.logs import setup_logging

if TYPE_CHECKING:
    from dagperf.profile import LocalPlan


def add_profile(commands: Commands) -> None:
    profile = commands.add_parser(
        "profile",
        help="run a benchmark locally (scheduler and workers on this machine)",
        description="Run a benchmark on this machine: the scheduler here, --workers worker "
        "processes, and, without --url, the built-in simulated LLM.",
    )
    local_flags(profile)
    profile.set_defaults(run=_profile)


def _profile(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dagperf.console import Console
    from dagperf.local_processes import LaunchError, LocalProcesses
    from dagperf.profile import run_local, run_sync

    run = checked(args, parser)
    options = run.options
    setup_logging(options.log.log_format, getattr(logging, options.log.log_level))
    if options.runs.num_profile_runs > 1:  # each run starts its own processes
        plan = local_plan(args, parser, run)
        if plan is None:
            return verdict.USAGE
        runs = options.runs
        return _repeated(plan, runs.num_profile_runs, runs.confidence_level, options.output.report)
    # SIGTERM while the dataset is read stops the processes as Ctrl-C does (the run's own
    # handlers take over once it runs), so none is left, nor its keys on disk.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:  # they start up while the dataset is read
        processes = LocalProcesses(run.launch)
    except LaunchError as e:
        print(f"dagperf: {e}", file=sys.stderr)
        return verdict.RUN_FAILED
    with processes:
        made = local_plan(args, parser, run)
        if made is None:
            return verdict.USAGE
        plan = made
        console = Console.for_output(options.output.quiet, options.log.log_format)

        async def go() -> int:
            outcome = await run_local(plan, console, processes)
            return report_outcome(
                outcome, console, plan.artifact_dir, options.health, options.output.report
            )

        return run_sync(go)


def _repeated(plan: LocalPlan, runs: int, confidence: float, report: bool) -> int:
    from dagperf.profile import run_sync
    from dagperf.repeat import run_repeated

    async def go() -> int:
        code = await run_repeated(plan, runs, confidence, sys.stdout)
        if report:  # the runs compared, into the aggregate's directory
            directory = plan.artifact_dir
            write_runs_report(directory / "profile_runs", "run_*", directory / "aggregate")
        return code

    return run_sync(go)
