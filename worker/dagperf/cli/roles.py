"""The commands that run dagperf's roles one per pod in a cluster: `scheduler` (workers connect
to it) and `worker`. `dagperf profile` runs both on one machine (`cli.profile`)."""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import os
import socket
import sys

from pydantic import ValidationError

from dagperf import verdict
from dagperf.apis.endpoint_config import EndpointConfig
from dagperf.cli.flags import (
    Commands,
    add_model_flags,
    keys_flag,
    log_flags,
    model_from_flags,
    role_keys,
)
from dagperf.cli.outcome import report_outcome
from dagperf.cli.plan import endpoint_fields, planned
from dagperf.cli.run_options import run_flags, run_options
from dagperf.options.role import SchedulerRoleOptions
from dagperf.runtime.logs import setup_logging
from dagperf.vocabulary.config import api_key_problem
from dagperf.vocabulary.keys import load_scheduler_keys, load_worker_keys

TERMINATION_MESSAGE_CHARS = 3000  # a pod's termination message holds 4 KB


def add_scheduler(commands: Commands) -> None:
    scheduler = commands.add_parser(
        "scheduler",
        help="run the scheduler role (workers connect to it)",
        description="Run the scheduler: bind a ZeroMQ ROUTER, wait for workers, run the "
        "benchmark, write the exports.",
    )
    run_flags(scheduler, url_required=True, metrics_port=9090)
    add_model_flags(scheduler, SchedulerRoleOptions, "scheduler")
    keys_flag(scheduler, "its own key pair, the workers' public key and the control token")
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


def _scheduler(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dagperf.console import Console
    from dagperf.profile import default_model, run_sync
    from dagperf.scheduler import Artifacts, Scheduler, SchedulerOptions

    options = run_options(parser, args)
    setup_logging(options.log.log_format, getattr(logging, options.log.log_level))
    if options.runs.num_profile_runs != 1:
        parser.error(
            "--num-profile-runs: the scheduler runs once; `dagperf profile` repeats a run with "
            "its own worker processes (as a Benchmark's runs.numProfileRuns does)"
        )
    role = model_from_flags(parser, args, SchedulerRoleOptions)
    keys = role_keys(parser, args, load_scheduler_keys)
    fields = endpoint_fields(parser, options)
    problems = io.StringIO()
    plan = planned(parser, options, role.workers_expected, problems)
    if plan is None:
        said = problems.getvalue()
        sys.stderr.write(said)
        if summary := options.output.summary_file:  # the pod's termination message
            summary.write_text(said[:TERMINATION_MESSAGE_CHARS])
        return verdict.USAGE
    graph, artifact_dir = plan.graph, plan.artifact_dir
    console = Console.for_output(options.output.quiet, options.log.log_format)

    async def go() -> int:
        if fields["model"] is None:
            fields["model"] = await default_model(
                graph, fields["url"], fields["api_key"], fields["endpoint_type"]
            )
        endpoint = EndpointConfig(**fields)
        input_config = plan.input_config | {"endpoint": endpoint.redacted()}
        scheduler = Scheduler(
            graph,
            endpoint,
            plan.load,
            Artifacts(artifact_dir, input_config),
            SchedulerOptions(
                keys=keys,
                bind=role.bind,
                expected_workers=role.workers_expected,
                worker_timeout_s=role.worker_timeout,
                registration_timeout_s=role.registration_timeout,
                **plan.settings,
            ),
            on_progress=console.progress,
        )
        loop = asyncio.get_running_loop()
        for sig in (2, 15):  # SIGINT, SIGTERM: stop gracefully, keep what was measured
            loop.add_signal_handler(sig, scheduler.interrupt, "stopped by a signal")
        outcome = await scheduler.run()
        return report_outcome(outcome, console, artifact_dir, options.health, options.output.report)

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
