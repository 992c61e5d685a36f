"""The `dagperf` command: one subcommand per role, each a thin shell over a library call.

Flags follow `aiperf profile` where a concept is shared. The load flags are generated from
`LoadConfig` and the simulator's from `SimConfig`, so a flag and the model it fills cannot drift
apart.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import sys
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeAlias

from pydantic import BaseModel, ValidationError

from dagperf import __version__, lifeline, verdict
from dagperf.config import EndpointConfig, LoadConfig, api_key_problem
from dagperf.dataset import DatasetError
from dagperf.graph import RequestGraph
from dagperf.health import HealthOptions, health_command
from dagperf.keys import (
    FILES,
    KEYS_ENV,
    KeysError,
    KeySet,
    load_scheduler_keys,
    load_worker_keys,
)
from dagperf.logs import LOG_FORMATS, setup_logging
from dagperf.simulator import SimConfig
from dagperf.sources import FILE_TYPES, load_graph, resolve_schedule, summary, synthetic_graph

DATASET_TYPES = tuple(FILE_TYPES)
ENV_DEFAULTS = {"fail_fast": "DAGPERF_DAG_FAIL_FAST"}  # flags whose default an env var sets
log = logging.getLogger("dagperf")


def main(argv: Sequence[str] | None = None) -> int:
    lifeline.hold()  # a child of `dagperf profile` or of a worker pod's parent dies with it
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args, parser)
        return code
    except KeyboardInterrupt:
        return 130


Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"  # add_subparsers'


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dagperf",
        description="Benchmark OpenAI-compatible LLM endpoints with DAG-shaped conversations.",
    )
    parser.add_argument("--version", action="version", version=f"dagperf {__version__}")
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")
    _add_profile(commands)
    _add_scheduler(commands)
    _add_worker(commands)
    _add_validate(commands)
    _add_health(commands)
    _add_keys(commands)
    _add_simulate(commands)
    return parser


def _add_profile(commands: Commands) -> None:
    profile = commands.add_parser(
        "profile",
        help="run a benchmark locally (scheduler and workers on this machine)",
        description="Run a benchmark on this machine: the scheduler here, --workers worker "
        "processes, and, without --url, the built-in simulated LLM.",
    )
    _benchmark_flags(profile, url_required=False)
    profile.add_argument(
        "--workers",
        type=int,
        default=_default_workers(),
        metavar="N",
        help="worker processes (default: %(default)s, from this machine's cores)",
    )
    _output_flags(profile)
    _report_flags(profile, metrics_port=None)
    _keys_flag(
        profile.add_argument_group("keys"),
        "its control token is the one POST /stop must present",
        ", else a key set made for this run alone",
    )
    _add_model_flags(profile, SimConfig, "built-in simulator (used without --url)", prefix="sim-")
    profile.set_defaults(run=_profile)


def _add_scheduler(commands: Commands) -> None:
    scheduler = commands.add_parser(
        "scheduler",
        help="run the scheduler role (workers connect to it)",
        description="Run the scheduler: bind a ZeroMQ ROUTER, wait for workers, run the "
        "benchmark, write the exports.",
    )
    _benchmark_flags(scheduler, url_required=True)
    roles = scheduler.add_argument_group("scheduler")
    roles.add_argument(
        "--bind", default="tcp://0.0.0.0:5555", help="ZeroMQ address (default: %(default)s)"
    )
    _keys_flag(roles, "its own key pair, the workers' public key and the control token")
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
    _output_flags(scheduler)
    _report_flags(scheduler, metrics_port=9090)
    scheduler.set_defaults(run=_scheduler)


def _add_worker(commands: Commands) -> None:
    worker = commands.add_parser(
        "worker",
        help="run the worker role (connects to a scheduler)",
        description="Run worker processes that send the scheduler's requests to the endpoint. "
        "Where they go (--url) and the API key (OPENAI_API_KEY) are the worker's own settings, "
        "never the scheduler's.",
    )
    worker.add_argument("--scheduler", required=True, help="the scheduler's ZeroMQ address")
    _keys_flag(worker, "the workers' key pair and the scheduler's public key")
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
    _log_flags(worker)
    worker.set_defaults(run=_worker)


def _add_validate(commands: Commands) -> None:
    validate = commands.add_parser(
        "validate",
        help="check a dataset file and summarize it",
        description="Check a dataset file. Exit 0 with a summary, or 1 with every problem as "
        "FILE:LINE: message.",
    )
    validate.add_argument("input_file", metavar="FILE", nargs="?", help="a dataset file")
    validate.add_argument(
        "--custom-dataset-type",
        choices=DATASET_TYPES,
        default="dag_jsonl",
        help="the file's format (default: %(default)s)",
    )
    validate.add_argument(
        "--session-config", metavar="FILE", help="check a synthetic session config instead"
    )
    validate.add_argument("--json", action="store_true", help="print the summary as JSON")
    validate.set_defaults(run=_validate)


def _add_health(commands: Commands) -> None:
    health = commands.add_parser(
        "health",
        help="check a finished run's artifacts",
        description="Check a run from its artifact directory: no request sent before its "
        "dependencies finished (plus its delay) nor later than the slack, root sessions within "
        "the concurrency, the root rate within tolerance, ignore_eos replies as long as asked. "
        "Writes health_check.json there. Exit 0 when every check passed or was skipped, 1 when "
        "one failed, 2 when the artifacts cannot be read.",
    )
    health.add_argument("artifact_dir", metavar="ARTIFACT_DIR")
    _add_model_flags(health, HealthOptions, "tolerances")
    health.set_defaults(run=_health)


def _add_keys(commands: Commands) -> None:
    keys = commands.add_parser(
        "keys",
        help="make a key set for the scheduler and worker roles",
        description="Write a new CURVE key set and control token into DIR (created 0700, files "
        "0600): give the scheduler scheduler.public, scheduler.secret, worker.public and "
        "control.token; give each worker scheduler.public, worker.public and worker.secret; "
        "POST /stop needs control.token as a bearer token.",
    )
    keys.add_argument("directory", metavar="DIR", type=Path)
    keys.add_argument("--force", action="store_true", help="replace a key set already there")
    keys.set_defaults(run=_keys)


def _add_simulate(commands: Commands) -> None:
    simulate = commands.add_parser(
        "simulate",
        help="serve the built-in simulated LLM",
        description="Serve an OpenAI-compatible simulated LLM with a prefix cache and a timing "
        "model, until interrupted.",
    )
    simulate.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: %(default)s)"
    )
    simulate.add_argument(
        "--port", type=int, default=8000, help="port to bind (default: %(default)s)"
    )
    _add_model_flags(simulate, SimConfig, "simulator")
    simulate.set_defaults(run=_simulate)


# --- flag groups -----------------------------------------------------------------------------


def _benchmark_flags(parser: argparse.ArgumentParser, url_required: bool) -> None:
    """What every command that runs a benchmark takes: dataset, endpoint, load, health."""
    _dataset_flags(parser)
    _endpoint_flags(parser, url_required)
    _add_model_flags(parser, LoadConfig, "load")
    _add_model_flags(parser, HealthOptions, "health checks (after the run)", prefix="health-")


def _dataset_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("dataset (a file, or a synthetic session config)")
    group.add_argument("--input-file", metavar="FILE", help="the dataset file")
    group.add_argument(
        "--custom-dataset-type",
        choices=DATASET_TYPES,
        default="dag_jsonl",
        help="its format (default: %(default)s)",
    )
    group.add_argument(
        "--session-config",
        metavar="FILE",
        help="generate the sessions from this YAML/JSON config (graph shape, lengths, seed) "
        "instead of reading a dataset file",
    )


def _endpoint_flags(parser: argparse.ArgumentParser, url_required: bool) -> None:
    group = parser.add_argument_group("endpoint")
    group.add_argument(
        "--url",
        required=url_required,
        help="server base URL" + ("" if url_required else " (default: the built-in simulator)"),
    )
    group.add_argument("-m", "--model", help="model name (default: the first one the server lists)")
    group.add_argument("--endpoint-type", choices=("chat", "completions"), default="chat")
    group.add_argument("--endpoint", help="request path, if not the standard one for the type")
    group.add_argument("--streaming", action="store_true", help="stream responses")
    group.add_argument("--api-key", help="bearer token (default: $OPENAI_API_KEY)")
    group.add_argument(
        "--extra-inputs",
        action="append",
        default=[],
        metavar="KEY:VALUE",
        help="add a body field to every request (repeatable; VALUE parsed as JSON "
        "when it can be, or give a whole JSON object)",
    )
    group.add_argument("--request-timeout-seconds", type=float, default=600.0, metavar="S")
    group.add_argument(
        "--session-affinity-header",
        default="X-Session-Affinity",
        metavar="NAME",
        help="header carrying each request's routing key ('' for none)",
    )


def _output_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("output")
    group.add_argument(
        "--artifact-dir",
        "--output-artifact-dir",
        type=Path,
        metavar="DIR",
        help="where the export files go (default: artifacts/<dataset>-<type>-<load>)",
    )
    group.add_argument("--quiet", action="store_true", help="no progress, only the summary")
    _log_flags(parser)


def _report_flags(parser: argparse.ArgumentParser, metrics_port: int | None) -> None:
    group = parser.add_argument_group("metrics")
    group.add_argument(
        "--tokenizer", metavar="PATH",
        help="a local tokenizer.json (or its directory) for token counts the server does not "
        "report; never downloaded (default: the server's usage, else estimates)",
    )  # fmt: skip
    group.add_argument(
        "--goodput", action="append", default=[], metavar='"METRIC:VALUE ..."',
        help="service-level objectives, e.g. \"time_to_first_token:100 inter_token_latency:10\" "
        "(ms; a floor for output_token_throughput_per_user): goodput counts requests meeting all",
    )  # fmt: skip
    shown = "off" if metrics_port is None else str(metrics_port)
    group.add_argument(
        "--metrics-port", type=int, default=metrics_port, metavar="PORT",
        help=f"serve /metrics (Prometheus), /status and /healthz on this port (default: {shown}; "
        "0 picks a free one)",
    )  # fmt: skip
    group.add_argument("--metrics-host", default="0.0.0.0", help="address for --metrics-port")
    group.add_argument(
        "--metrics-linger", type=float, default=0.0, metavar="S",
        help="keep serving /metrics this long after the run, for a last scrape",
    )  # fmt: skip
    group.add_argument(
        "--summary-file", type=Path, metavar="PATH",
        help="also write a compact JSON summary (under 4 KB) here, e.g. a termination message",
    )  # fmt: skip
    group.add_argument(
        "--max-error-rate", type=float, default=1.0, metavar="FRACTION",
        help="fail the run (exit code 3) when more than this fraction of requests failed "
        "(default: 1.0, only when every request failed)",
    )  # fmt: skip
    group.add_argument(
        "--benchmark-name", metavar="NAME",
        help="the `benchmark` label of the live metrics (default: the artifact directory's name)",
    )  # fmt: skip


def _report_options(
    parser: argparse.ArgumentParser, args: argparse.Namespace, artifact_dir: Path
) -> dict[str, Any]:
    """Scheduler settings from the metrics flags, checked before anything starts."""
    from dagperf.metrics.catalog import OBJECTIVE_IS_CEILING
    from dagperf.metrics.tokens import TokenizerError, read_tokenizer

    tokenizer_json = None
    if args.tokenizer is not None:
        try:
            tokenizer_json = read_tokenizer(args.tokenizer)
        except TokenizerError as e:
            parser.error(f"--tokenizer: {e}")
    goodput: dict[str, float] = {}
    for item in " ".join(args.goodput).split():
        name, _, raw = item.partition(":")
        if name not in OBJECTIVE_IS_CEILING:
            known = ", ".join(OBJECTIVE_IS_CEILING)
            parser.error(f"--goodput: {name!r} is not a metric an objective can name ({known})")
        try:
            goodput[name] = float(raw)
        except ValueError:
            parser.error(f"--goodput: expected METRIC:VALUE with a number, got {item!r}")
    if not 0.0 <= args.max_error_rate <= 1.0:  # also refuses nan
        parser.error(f"--max-error-rate: a fraction from 0 to 1, got {args.max_error_rate}")
    if args.metrics_port is not None and not 0 <= args.metrics_port < 65536:
        parser.error(f"--metrics-port: not a port: {args.metrics_port}")
    return {
        "goodput": goodput or None,
        "tokenizer_json": tokenizer_json,
        "benchmark": args.benchmark_name or artifact_dir.name,
        "metrics_port": args.metrics_port,
        "metrics_host": args.metrics_host,
        "metrics_linger_s": args.metrics_linger,
        "summary_file": args.summary_file,
        "max_error_rate": args.max_error_rate,
    }


def _keys_flag(group: Any, holding: str, otherwise: str = "") -> None:
    group.add_argument(
        "--keys", metavar="DIR", type=Path,
        default=Path(os.environ[KEYS_ENV]) if os.environ.get(KEYS_ENV) else None,
        help=f"the key directory `dagperf keys` wrote: {holding} (default: ${KEYS_ENV}"
        f"{otherwise}); the wire is always CURVE-authenticated and encrypted",
    )  # fmt: skip


def _role_keys(parser: argparse.ArgumentParser, args: argparse.Namespace, load: Any) -> Any:
    if args.keys is None:
        parser.error("--keys DIR is required (make a key set with `dagperf keys DIR`)")
    try:
        return load(args.keys)
    except KeysError as e:
        parser.error(f"--keys: {e}")


def _log_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="text, or JSON lines for CI and pods (default: %(default)s)",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR")
    )


def _add_model_flags(
    parser: argparse.ArgumentParser, model: type[BaseModel], title: str, prefix: str = ""
) -> None:
    """One flag per field of a flat pydantic model, with its description as the help."""
    group = parser.add_argument_group(title)
    for name, field in model.model_fields.items():
        flag = f"--{prefix}{name.replace('_', '-')}"
        dest = f"{prefix.replace('-', '_')}{name}"
        kind = _scalar(field.annotation)
        if kind is bool:
            default = field.default
            if env := ENV_DEFAULTS.get(name):
                default = os.environ.get(env, "").lower() in ("1", "true", "yes") or default
            group.add_argument(
                flag,
                dest=dest,
                action=argparse.BooleanOptionalAction,
                default=default,
                help=field.description,
            )
        else:
            shown = "" if field.default is None else " (default: %(default)s)"
            group.add_argument(
                flag,
                dest=dest,
                type=kind,
                default=field.default,
                metavar=name.upper(),
                help=f"{field.description}{shown}",
            )


def _scalar(annotation: Any) -> Any:
    """int for `int | None`, and so on."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return next(a for a in typing.get_args(annotation) if a is not type(None))
    return annotation


def _model_from_flags(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    model: type[BaseModel],
    prefix: str = "",
) -> Any:
    try:
        return model(**{name: getattr(args, prefix + name) for name in model.model_fields})
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        if not first["loc"]:  # a rule across fields: its message names them
            parser.error(first["msg"].removeprefix("Value error, "))
        flag = f"--{prefix.replace('_', '-')}{str(first['loc'][0]).replace('_', '-')}"
        parser.error(f"{flag}: {first['msg']}")


def _default_workers() -> int:
    return max(1, min(8, (os.cpu_count() or 2) // 2))


# --- commands --------------------------------------------------------------------------------


def _load_graph(
    parser: argparse.ArgumentParser, args: argparse.Namespace, out: typing.TextIO = sys.stderr
) -> RequestGraph | None:
    """The graph the flags name, or None after printing every problem with it."""
    path, config = args.input_file, args.session_config
    if (path is None) == (config is None):
        parser.error("give a dataset file or --session-config FILE (one of them)")
    kind = "session config" if config else args.custom_dataset_type
    try:
        return synthetic_graph(config) if config else load_graph(path, args.custom_dataset_type)
    except DatasetError as e:
        for problem in e.problems:
            print(problem, file=out)
        print(f"{config or path}: invalid {kind}, {len(e.problems)} problem(s)", file=out)
        return None


def _load_and_schedule(
    parser: argparse.ArgumentParser, args: argparse.Namespace, load: LoadConfig
) -> tuple[RequestGraph, LoadConfig] | None:
    graph = _load_graph(parser, args)
    if graph is None:
        return None
    try:
        load = resolve_schedule(_default_stop(load, graph), graph)
    except ValueError as e:
        parser.error(str(e))
    return graph, load


def _endpoint_fields(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    fields = {
        "url": args.url,
        "model": args.model,
        "endpoint_type": args.endpoint_type,
        "endpoint": args.endpoint,
        "streaming": args.streaming,
        "api_key": args.api_key or os.environ.get("OPENAI_API_KEY") or None,
        "extra_inputs": _extra_inputs(parser, args.extra_inputs),
        "request_timeout_seconds": args.request_timeout_seconds,
        "session_affinity_header": args.session_affinity_header,
    }
    try:  # check the flags now, with stand-ins for what is only known once a server runs
        EndpointConfig(**(fields | {"url": args.url or "127.0.0.1", "model": args.model or "-"}))
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        flag = "--" + str(first["loc"][0] if first["loc"] else "url").replace("_", "-")
        parser.error(f"{flag}: {first['msg'].removeprefix('Value error, ')}")
    return fields


def _extra_inputs(parser: argparse.ArgumentParser, items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if item.lstrip().startswith("{"):
            try:
                value = json.loads(item)
            except ValueError as e:
                parser.error(f"--extra-inputs: not a JSON object: {e}")
            if not isinstance(value, dict):
                parser.error("--extra-inputs: not a JSON object")
            out.update(value)
            continue
        key, sep, raw = item.partition(":")
        if not sep or not key:
            parser.error(f"--extra-inputs: expected KEY:VALUE or a JSON object, got {item!r}")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


def _default_stop(load: LoadConfig, graph: RequestGraph) -> LoadConfig:
    if load.request_count or load.num_conversations or load.benchmark_duration:
        return load
    log.info(
        "No request count or conversation count provided; defaulting --num-conversations to %d "
        "(run each root in the file once). Use --request-count for a literal wire-request cap "
        "instead.",
        graph.root_count,
    )
    return load.model_copy(update={"num_conversations": graph.root_count})


def _artifact_dir(args: argparse.Namespace, load: LoadConfig) -> Path:
    if args.artifact_dir is not None:
        return Path(args.artifact_dir)
    if load.request_rate:
        shape = f"rate{load.request_rate:g}"
    elif load.fixed_schedule:
        shape = "schedule" + (f"-concurrency{load.concurrency}" if load.concurrency else "")
    else:
        shape = f"concurrency{load.concurrency or 1}"
    name = Path(args.session_config or args.input_file).name.split(".")[0]
    return Path("artifacts") / f"{name}-{args.endpoint_type}-{shape}"


def _input_config(
    args: argparse.Namespace, load: LoadConfig, workers: int, options: dict[str, Any]
) -> dict[str, Any]:
    return {
        "dataset": {"path": str(args.input_file), "type": args.custom_dataset_type}
        if args.input_file
        else {"path": str(args.session_config), "type": "synthetic"},
        "load": load.model_dump(mode="json"),
        "workers": workers,
        "tokenizer": str(Path(args.tokenizer).resolve()) if args.tokenizer else None,
        "goodput": options["goodput"],
    }


def _profile(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dagperf.console import Console
    from dagperf.profile import LocalPlan, run_local, run_sync

    setup_logging(args.log_format, getattr(logging, args.log_level))
    endpoint = _endpoint_fields(parser, args)
    load = _model_from_flags(parser, args, LoadConfig)
    if args.workers < 1:
        parser.error("--workers: must be at least 1")
    sim = _model_from_flags(parser, args, SimConfig, prefix="sim_")
    health = _model_from_flags(parser, args, HealthOptions, prefix="health_")
    if args.keys is not None:
        _role_keys(parser, args, load_scheduler_keys)  # a bad key set is a usage error
    loaded = _load_and_schedule(parser, args, load)
    if loaded is None:
        return verdict.USAGE
    graph, load = loaded
    artifact_dir = _artifact_dir(args, load)
    options = _report_options(parser, args, artifact_dir)
    _writable(parser, artifact_dir)
    plan = LocalPlan(
        graph=graph,
        endpoint=endpoint,
        load=load,
        workers=args.workers,
        artifact_dir=artifact_dir,
        input_config=_input_config(args, load, args.workers, options),
        log_format=args.log_format,
        simulator_args=_simulator_args(sim),
        scheduler_options=options,
        keys_dir=args.keys,
    )
    console = Console(quiet=args.quiet)

    async def go() -> int:
        outcome = await run_local(plan, console)
        return _report(outcome, console, plan.artifact_dir, health)

    return run_sync(go)


def _writable(parser: argparse.ArgumentParser, directory: Path) -> None:
    """Create the artifact directory and write in it now, before a process starts or a
    request is sent: a run whose results cannot be kept should not begin."""
    probe = directory / f".dagperf-probe-{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        parser.error(f"--artifact-dir: cannot write to {directory}: {e.strerror or e}")


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


def _report(outcome: Any, console: Any, artifact_dir: Path, health: HealthOptions) -> int:
    console.summary(outcome.document, str(artifact_dir))
    if (artifact_dir / "profile_export_aiperf.json").exists():  # not when the disk was full
        # The verdict is printed and exported; the exit code stays the run's own.
        health_command(str(artifact_dir), health)
    if outcome.failure:
        print(f"dagperf: the run failed: {outcome.failure}", file=sys.stderr)
        return verdict.RUN_FAILED
    if outcome.interrupted:
        return verdict.SIGNALLED
    if outcome.rejected:
        print(f"dagperf: the endpoint failed the run: {outcome.rejected}", file=sys.stderr)
        return verdict.ENDPOINT_FAILED
    return verdict.OK


def _scheduler(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dagperf.console import Console
    from dagperf.profile import default_model, run_sync
    from dagperf.scheduler import Artifacts, Scheduler, SchedulerOptions

    setup_logging(args.log_format, getattr(logging, args.log_level))
    keys = _role_keys(parser, args, load_scheduler_keys)
    fields = _endpoint_fields(parser, args)
    load = _model_from_flags(parser, args, LoadConfig)
    health = _model_from_flags(parser, args, HealthOptions, prefix="health_")
    loaded = _load_and_schedule(parser, args, load)
    if loaded is None:
        return verdict.USAGE
    graph, load = loaded
    artifact_dir = _artifact_dir(args, load)
    options = _report_options(parser, args, artifact_dir)
    _writable(parser, artifact_dir)
    console = Console(quiet=args.quiet)

    async def go() -> int:
        if fields["model"] is None:
            fields["model"] = await default_model(graph, fields["url"], fields["api_key"])
        endpoint = EndpointConfig(**fields)
        input_config = _input_config(args, load, args.workers_expected, options)
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
        return _report(await scheduler.run(), console, artifact_dir, health)

    return run_sync(go)


def _worker(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dagperf.worker import WorkerConfig, serve_workers

    setup_logging(args.log_format, getattr(logging, args.log_level))
    if args.processes < 1:
        parser.error("--processes: must be at least 1")
    keys = _role_keys(parser, args, load_worker_keys)
    api_key = os.environ.get("OPENAI_API_KEY", "").strip()
    if problem := api_key_problem(api_key):
        parser.error(f"OPENAI_API_KEY: {problem}")
    try:  # the same normal form as the scheduler's, which compares them
        endpoint = EndpointConfig(url=args.url, model="-", endpoint=args.endpoint)
    except ValidationError as e:
        parser.error(f"--url: {e.errors(include_url=False)[0]['msg']}")
    config = WorkerConfig(
        args.scheduler, args.worker_id, keys, endpoint.url, endpoint.endpoint,
        args.scheduler_timeout, api_key or None,
    )  # fmt: skip
    log_flags = [f"--log-format={args.log_format}", f"--log-level={args.log_level}"]
    return serve_workers(config, str(args.keys), args.processes, log_flags)


def _keys(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    present = [name for name in FILES if (args.directory / name).exists()]
    if present and not args.force:
        print(f"dagperf: {args.directory} already holds keys ({', '.join(present)}); "
              "--force replaces them", file=sys.stderr)  # fmt: skip
        return 1
    try:
        KeySet.generate().write(args.directory)
    except OSError as e:
        print(f"dagperf: cannot write keys to {args.directory}: {e.strerror}", file=sys.stderr)
        return 1
    print(f"wrote a key set to {args.directory}: {', '.join(FILES)}")
    return 0


def _validate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    graph = _load_graph(parser, args, out=sys.stdout)
    if graph is None:
        return 1
    name = args.session_config or args.input_file
    figures = summary(graph)
    if args.json:
        keys = {name: name.lower().replace(" ", "_") for name in figures}
        print(json.dumps({"file": name} | {keys[k]: v for k, v in figures.items()}))
    else:
        kind = "session config" if args.session_config else args.custom_dataset_type
        print(f"{name}: valid {kind}")
        for label, value in figures.items():
            print(f"  {label:<18}{value:>10,}")
    return 0


def _health(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    return health_command(args.artifact_dir, _model_from_flags(parser, args, HealthOptions))


def _simulate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dagperf.simulator import serve_simulator

    config = _model_from_flags(parser, args, SimConfig)
    serve_simulator(config, args.host, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
