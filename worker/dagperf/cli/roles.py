"""The commands that run dagperf's roles: `profile` (scheduler, workers and, without --url, the
simulator on this machine), `scheduler` and `worker` (one each per pod in a cluster)."""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from dagperf import verdict
from dagperf.apis.endpoint_config import EndpointConfig
from dagperf.cli.benchmark import (
    artifact_dir_for,
    benchmark_flags,
    endpoint_fields,
    ensure_writable,
    graph_and_load,
    output_flags,
    recorded_inputs,
    report_flags,
    report_options,
    report_outcome,
    write_runs_report,
)
from dagperf.cli.flags import (
    Commands,
    add_model_flags,
    default_workers,
    keys_flag,
    log_flags,
    model_from_flags,
    role_keys,
)
from dagperf.health import HealthOptions
from dagperf.runtime.logs import setup_logging
from dagperf.simulator import SimConfig
from dagperf.vocabulary.config import LoadConfig, api_key_problem
from dagperf.vocabulary.keys import load_scheduler_keys, load_worker_keys

if TYPE_CHECKING:
    from dagperf.local_processes import Launch
    from dagperf.profile import LocalPlan

TERMINATION_MESSAGE_CHARS = 3000  # a pod's termination message holds 4 KB


def add_profile(commands: Commands) -> None:
    profile = commands.add_parser(
        "profile",
        help="run a benchmark locally (scheduler and workers on this machine)",
        description="Run a benchmark on this machine: the scheduler here, --workers worker "
        "processes, and, without --url, the built-in simulated LLM.",
    )
    profile_flags(profile)
    profile.set_defaults(run=_profile)


def profile_flags(profile: argparse.ArgumentParser) -> None:
    """Every flag of `dagperf profile` (`dagperf search` takes them all too)."""
    benchmark_flags(profile, url_required=False)
    profile.add_argument(
        "--workers",
        type=int,
        default=default_workers(),
        metavar="N",
        help="worker processes (default: %(default)s, from this machine's cores)",
    )
    output_flags(profile)
    report_flags(profile, metrics_port=None)
    keys_flag(
        profile.add_argument_group("keys"),
        "its control token is the one POST /stop must present",
        ", else a key set made for this run alone",
    )
    add_model_flags(profile, SimConfig, "built-in simulator (used without --url)", prefix="sim-")
    repeats = profile.add_argument_group("repeats")
    repeats.add_argument(
        "--num-profile-runs",
        type=int,
        default=1,
        metavar="N",
        help="run N times (the same workload and seed; the warm-up once) and report each "
        "figure's mean and confidence interval, flagging figures whose runs disagree",
    )
    repeats.add_argument(
        "--confidence-level",
        type=float,
        default=0.95,
        metavar="LEVEL",
        help="of the intervals (default: %(default)s)",
    )


def add_scheduler(commands: Commands) -> None:
    scheduler = commands.add_parser(
        "scheduler",
        help="run the scheduler role (workers connect to it)",
        description="Run the scheduler: bind a ZeroMQ ROUTER, wait for workers, run the "
        "benchmark, write the exports.",
    )
    benchmark_flags(scheduler, url_required=True)
    roles = scheduler.add_argument_group("scheduler")
    roles.add_argument(
        "--bind", default="tcp://0.0.0.0:5555", help="ZeroMQ address (default: %(default)s)"
    )
    keys_flag(roles, "its own key pair, the workers' public key and the control token")
    roles.add_argument(
        "--workers-expected",
        type=int,
        default=1,
        metavar="N",
        help="workers to wait for before starting (default: %(default)s)",
    )
    roles.add_argument(
        "--registration-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds to wait for them (default: %(default)s)",
    )
    roles.add_argument(
        "--worker-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="a worker silent this long is lost (default: %(default)s)",
    )
    output_flags(scheduler)
    report_flags(scheduler, metrics_port=9090)
    scheduler.set_defaults(run=_scheduler)


def add_worker(commands: Commands) -> None:
    worker = commands.add_parser(
        "worker",
        help="run the worker role (connects to a scheduler)",
        description="Run worker processes that send the scheduler's requests to the endpoint. "
        "Where they go (--url) and the API key (OPENAI_API_KEY) are the worker's own settings, "
        "never the scheduler's.",
    )
    worker.add_argument("--scheduler", required=True, help="the scheduler's ZeroMQ address")
    keys_flag(worker, "the workers' key pair and the scheduler's public key")
    worker.add_argument(
        "--url", required=True, help="the server's base URL (the scheduler's --url)"
    )
    worker.add_argument("--endpoint", help="request path, if not the standard one for the type")
    worker.add_argument(
        "--worker-id",
        default=os.environ.get("POD_NAME") or socket.gethostname(),
        help="identity (default: $POD_NAME or the host name); with --processes N, each process "
        "adds -0 .. -N-1",
    )
    worker.add_argument("--processes", type=int, default=1, metavar="N", help="worker processes")
    worker.add_argument(
        "--scheduler-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="register again after this long without word from the scheduler",
    )
    worker.add_argument(  # dagperf profile starts its workers while it reads the dataset
        "--wait-for-start", action="store_true", help=argparse.SUPPRESS
    )
    log_flags(worker)
    worker.set_defaults(run=_worker)


def _profile(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dagperf.console import Console
    from dagperf.local_processes import LaunchError, LocalProcesses
    from dagperf.profile import run_local, run_sync

    setup_logging(args.log_format, getattr(logging, args.log_level))
    if args.num_profile_runs < 1:
        parser.error("--num-profile-runs: must be at least 1")
    if not 0 < args.confidence_level < 1:
        parser.error(f"--confidence-level: between 0 and 1, got {args.confidence_level}")
    flags = checked_flags(args, parser)
    if args.num_profile_runs > 1:  # each run starts its own processes
        made = local_plan(args, parser, flags)
        if made is None:
            return verdict.USAGE
        return _repeated(made[0], args.num_profile_runs, args.confidence_level, args.report)
    # SIGTERM while the dataset is read stops the processes as Ctrl-C does (the run's own
    # handlers take over once it runs), so none is left, nor its keys on disk.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:  # they start up while the dataset is read
        processes = LocalProcesses(flags.launch)
    except LaunchError as e:
        print(f"dagperf: {e}", file=sys.stderr)
        return verdict.RUN_FAILED
    with processes:
        made = local_plan(args, parser, flags)
        if made is None:
            return verdict.USAGE
        plan, health = made
        console = Console.for_output(args.quiet, args.log_format)

        async def go() -> int:
            outcome = await run_local(plan, console, processes)
            return report_outcome(outcome, console, plan.artifact_dir, health, args.report)

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


@dataclass(frozen=True)
class ProfileFlags:
    """The flags of a local run checked before its dataset is read."""

    endpoint: dict[str, Any]  # EndpointConfig fields; `url` and `model` may still be None
    load: LoadConfig
    health: HealthOptions
    launch: Launch


def checked_flags(args: argparse.Namespace, parser: argparse.ArgumentParser) -> ProfileFlags:
    """The flags that need no dataset, each checked (a bad one is a usage error)."""
    from dagperf.local_processes import Launch

    endpoint = endpoint_fields(parser, args)
    load = model_from_flags(parser, args, LoadConfig)
    if args.workers < 1:
        parser.error("--workers: must be at least 1")
    sim = model_from_flags(parser, args, SimConfig, prefix="sim_")
    health = model_from_flags(parser, args, HealthOptions, prefix="health_")
    if args.keys is not None:
        role_keys(parser, args, load_scheduler_keys)  # a bad key set is a usage error
    launch = Launch(
        args.workers,
        args.url,
        args.endpoint,
        endpoint["api_key"],
        args.keys,
        args.log_format,
        simulator_args=_simulator_args(sim),
    )
    return ProfileFlags(endpoint, load, health, launch)


def local_plan(
    args: argparse.Namespace, parser: argparse.ArgumentParser, flags: ProfileFlags | None = None
) -> tuple[LocalPlan, HealthOptions] | None:
    """A local run from `dagperf profile`'s flags, every one checked before the run starts;
    None after printing the dataset's problems."""
    from dagperf.profile import LocalPlan

    flags = flags or checked_flags(args, parser)
    loaded = graph_and_load(parser, args, flags.load)
    if loaded is None:
        return None
    graph, load = loaded
    artifact_dir = artifact_dir_for(args, load)
    options = report_options(parser, args, artifact_dir)
    ensure_writable(parser, artifact_dir)
    plan = LocalPlan(
        graph=graph,
        endpoint=flags.endpoint,
        load=load,
        launch=flags.launch,
        artifact_dir=artifact_dir,
        input_config=recorded_inputs(args, load, args.workers, options),
        scheduler_options=options,
    )
    return plan, flags.health


def _simulator_args(config: SimConfig) -> tuple[str, ...]:
    out: list[str] = []
    for name, value in config.model_dump().items():
        if value != SimConfig.model_fields[name].default:
            flag = "--" + name.replace("_", "-")
            out += (
                [flag]
                if value is True
                else [f"--no-{flag[2:]}"]
                if value is False
                else [flag, str(value)]
            )
    return tuple(out)


def _scheduler(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dagperf.console import Console
    from dagperf.profile import default_model, run_sync
    from dagperf.scheduler import Artifacts, Scheduler, SchedulerOptions

    setup_logging(args.log_format, getattr(logging, args.log_level))
    keys = role_keys(parser, args, load_scheduler_keys)
    fields = endpoint_fields(parser, args)
    load = model_from_flags(parser, args, LoadConfig)
    health = model_from_flags(parser, args, HealthOptions, prefix="health_")
    problems = io.StringIO()
    loaded = graph_and_load(parser, args, load, problems)
    if loaded is None:
        said = problems.getvalue()
        sys.stderr.write(said)
        if args.summary_file:  # the pod's termination message: the operator shows it
            Path(args.summary_file).write_text(said[:TERMINATION_MESSAGE_CHARS])
        return verdict.USAGE
    graph, load = loaded
    artifact_dir = artifact_dir_for(args, load)
    options = report_options(parser, args, artifact_dir)
    ensure_writable(parser, artifact_dir)
    console = Console.for_output(args.quiet, args.log_format)

    async def go() -> int:
        if fields["model"] is None:
            fields["model"] = await default_model(
                graph, fields["url"], fields["api_key"], fields["endpoint_type"]
            )
        endpoint = EndpointConfig(**fields)
        input_config = recorded_inputs(args, load, args.workers_expected, options)
        input_config["endpoint"] = endpoint.redacted()
        scheduler = Scheduler(
            graph,
            endpoint,
            load,
            Artifacts(artifact_dir, input_config),
            SchedulerOptions(
                keys=keys,
                bind=args.bind,
                expected_workers=args.workers_expected,
                worker_timeout_s=args.worker_timeout,
                registration_timeout_s=args.registration_timeout,
                **options,
            ),
            on_progress=console.progress,
        )
        loop = asyncio.get_running_loop()
        for sig in (2, 15):  # SIGINT, SIGTERM: stop gracefully, keep what was measured
            loop.add_signal_handler(sig, scheduler.interrupt, "stopped by a signal")
        outcome = await scheduler.run()
        return report_outcome(outcome, console, artifact_dir, health, args.report)

    return run_sync(go)


def _worker(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dagperf.worker import WorkerConfig, serve_workers

    setup_logging(args.log_format, getattr(logging, args.log_level))
    if args.processes < 1:
        parser.error("--processes: must be at least 1")
    keys = role_keys(parser, args, load_worker_keys)
    api_key = os.environ.get("OPENAI_API_KEY", "").strip()
    if problem := api_key_problem(api_key):
        parser.error(f"OPENAI_API_KEY: {problem}")
    try:  # the same normal form as the scheduler's, which compares them
        endpoint = EndpointConfig(url=args.url, model="-", endpoint=args.endpoint)
    except ValidationError as e:
        parser.error(f"--url: {e.errors(include_url=False)[0]['msg']}")
    config = WorkerConfig(
        args.scheduler,
        args.worker_id,
        keys,
        endpoint.url,
        endpoint.endpoint,
        args.scheduler_timeout,
        api_key or None,
    )
    log_flags = [f"--log-format={args.log_format}", f"--log-level={args.log_level}"]
    if args.wait_for_start and not sys.stdin.readline():
        return verdict.OK  # the run that started this worker ended before it began
    return serve_workers(config, str(args.keys), args.processes, log_flags)
