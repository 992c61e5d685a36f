"""What every command that runs a benchmark takes (dataset, endpoint, load, health, output,
metrics), checked before anything starts, and how its outcome becomes an exit code."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import typing
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dagperf import verdict
from dagperf.apis import APIS, described
from dagperf.apis.endpoint_config import AFFINITY_HEADERS, EndpointConfig
from dagperf.cli.flags import add_model_flags, log_flags
from dagperf.dataset import DatasetError
from dagperf.dataset.formats import FORMATS, ReadOptions
from dagperf.fetch import FetchError, is_url, local_copy, shown
from dagperf.graph import RequestGraph
from dagperf.health import HealthOptions, health_command
from dagperf.load import LoadError, resolve_load
from dagperf.sources import load_graph, synthetic_graph
from dagperf.vocabulary.config import LoadConfig

FLAG_OF_FIELD = {"backend_headers": "backend_header"}  # a list field of a repeatable flag


log = logging.getLogger("dagperf")


def benchmark_flags(parser: argparse.ArgumentParser, url_required: bool) -> None:
    """What every command that runs a benchmark takes: dataset, endpoint, load, health."""
    _dataset_flags(parser)
    _endpoint_flags(parser, url_required)
    add_model_flags(parser, LoadConfig, "load")
    add_model_flags(parser, HealthOptions, "health checks (after the run)", prefix="health-")


def _dataset_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("dataset (a file, or a synthetic session config)")
    group.add_argument(
        "--input-file",
        metavar="FILE",
        help="the dataset file, or an http(s) URL of one (with --input-sha256)",
    )
    group.add_argument(
        "--input-sha256",
        metavar="HEX",
        help="the SHA-256 the dataset file must have: required for a URL, checked before the "
        "file is read",
    )
    group.add_argument(
        "--custom-dataset-type",
        choices=tuple(FORMATS),
        default="dag_jsonl",
        help="its format (default: %(default)s)",
    )
    group.add_argument(
        "--use-think-time-only",
        action="store_true",
        help="agent traces (weka_trace, tracelab): wait each recorded call's think_time before "
        "it, not the idle gap between the calls (AIPerf's flag)",
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
    group.add_argument(
        "--endpoint-type",
        choices=tuple(APIS),
        default="chat",
        help=f"the API to call: {described()} (default: %(default)s)",
    )
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
    group.add_argument(
        "--request-timeout-seconds",
        type=float,
        default=600.0,
        metavar="S",
        help="a request with no complete response within S seconds of being sent fails with "
        "a TimeoutError record (default: %(default)g)",
    )
    group.add_argument(
        "--backend-header",
        action="append",
        default=[],
        metavar="NAME",
        help="a response header naming the backend that served each request (repeatable, "
        "tried in order; default: the address that answered); see docs/backends.md",
    )
    group.add_argument(
        "--session-affinity-header",
        action="append",
        metavar="NAME",
        help="a header carrying each request's routing key, a FORK tree's root key (repeatable; "
        f"default: {', '.join(AFFINITY_HEADERS)}, what the common routers read; '' sends none); "
        "see docs/backends.md",
    )


def output_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("output")
    group.add_argument(
        "--artifact-dir",
        "--output-artifact-dir",
        type=Path,
        metavar="DIR",
        help="where the export files go (default: artifacts/<dataset>-<type>-<load>)",
    )
    group.add_argument("--quiet", action="store_true", help="no progress, only the summary")
    group.add_argument(
        "--report",
        action="store_true",
        help="write report.html (see `dagperf report`) into the artifact directory at the end",
    )
    log_flags(parser)


def report_flags(parser: argparse.ArgumentParser, metrics_port: int | None) -> None:
    group = parser.add_argument_group("metrics")
    group.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="a local tokenizer.json (or its directory) for token counts the server does not "
        "report; never downloaded (default: the server's usage, else estimates)",
    )
    group.add_argument(
        "--goodput",
        action="append",
        default=[],
        metavar='"METRIC:VALUE ..."',
        help='service-level objectives, e.g. "time_to_first_token:100 inter_token_latency:10" '
        "(ms; a floor for output_token_throughput_per_user): goodput counts requests meeting all",
    )
    shown = "off" if metrics_port is None else str(metrics_port)
    group.add_argument(
        "--metrics-port",
        type=int,
        default=metrics_port,
        metavar="PORT",
        help=f"serve /metrics (Prometheus), /status and /healthz on this port (default: {shown}; "
        "0 picks a free one)",
    )
    group.add_argument("--metrics-host", default="0.0.0.0", help="address for --metrics-port")
    group.add_argument(
        "--metrics-linger",
        type=float,
        default=0.0,
        metavar="S",
        help="keep serving /metrics this long after the run, for a last scrape",
    )
    group.add_argument(
        "--summary-file",
        type=Path,
        metavar="PATH",
        help="also write a compact JSON summary (under 4 KB) here, e.g. a termination message",
    )
    group.add_argument(
        "--max-error-rate",
        type=float,
        default=verdict.DEFAULT_MAX_ERROR_RATE,
        metavar="FRACTION",
        help="fail the run (exit code 3) when the endpoint failed more than this fraction of "
        "the requests it answered or failed (requests the run cut short are not errors); 1.0 "
        "fails only a run where every request failed (default: %(default)s)",
    )
    group.add_argument(
        "--slice-duration",
        type=float,
        metavar="S",
        help="also export the run in windows of S seconds (profile_export_aiperf_timeslices"
        ".json and .csv): each window's requests, throughput and metric statistics",
    )
    _server_metrics_flags(group)
    group.add_argument(
        "--benchmark-name",
        metavar="NAME",
        help="the `benchmark` label of the live metrics (default: the artifact directory's name)",
    )


def _server_metrics_flags(group: argparse._ArgumentGroup) -> None:
    """The servers' own metrics, scraped during the run (docs/backends.md)."""
    group.add_argument(
        "--server-metrics-url",
        action="append",
        default=[],
        metavar="URL",
        help="a Prometheus text endpoint of a server (a vLLM or SGLang pod, a DCGM exporter) "
        "to scrape during the run into server_metrics.jsonl (repeatable); see docs/backends.md",
    )
    group.add_argument(
        "--server-metrics-interval",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds between scrapes (default: %(default)s)",
    )


def report_options(
    parser: argparse.ArgumentParser, args: argparse.Namespace, artifact_dir: Path
) -> dict[str, Any]:
    """Scheduler settings from the metrics flags, checked before anything starts."""
    from dagperf.exports.server_metrics import ScrapeTargets
    from dagperf.vocabulary.catalog import OBJECTIVE_IS_CEILING
    from dagperf.vocabulary.tokens import TokenizerError, read_tokenizer

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
    if args.slice_duration is not None and not 0 < args.slice_duration < math.inf:
        parser.error(f"--slice-duration: a number of seconds above 0, got {args.slice_duration}")
    if not 0.05 <= args.server_metrics_interval < math.inf:
        parser.error(
            f"--server-metrics-interval: 0.05 s or more, got {args.server_metrics_interval}"
        )
    for url in args.server_metrics_url:
        if not url.startswith(("http://", "https://")):
            parser.error(f"--server-metrics-url: not an http(s) URL: {url!r}")
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
        "slice_duration_s": args.slice_duration,
        "scrape": ScrapeTargets(tuple(args.server_metrics_url), args.server_metrics_interval)
        if args.server_metrics_url
        else None,
    }


def read_graph(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    out: typing.TextIO = sys.stderr,
    options: ReadOptions | None = None,
) -> RequestGraph | None:
    """The graph the flags name, or None after printing every problem with it."""
    path, config = args.input_file, args.session_config
    if (path is None) == (config is None):
        parser.error("give a dataset file or --session-config FILE (one of them)")
    kind = "session config" if config else args.custom_dataset_type
    named = config or path
    if not is_url(named) and not os.path.lexists(named):
        print(f"dagperf: no such file: {named}", file=out)  # nothing else to say about it
        return None
    try:
        if config:
            return synthetic_graph(config)
        with local_copy(path, args.input_sha256) as local:
            return load_graph(local, args.custom_dataset_type, shown(path), options)
    except FetchError as e:
        print(f"dagperf: {e}", file=out)
        return None
    except DatasetError as e:
        for problem in e.problems:
            print(problem, file=out)
        print(f"{config or path}: invalid {kind}, {len(e.problems)} problem(s)", file=out)
        return None


def graph_and_load(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    load: LoadConfig,
    out: typing.TextIO = sys.stderr,
) -> tuple[RequestGraph, LoadConfig] | None:
    graph = read_graph(parser, args, out, _read_options(parser, args, load))
    if graph is None:
        return None
    try:
        resolved = resolve_load(load, graph)
    except LoadError as e:
        parser.error(str(e))
    if resolved.num_conversations != load.num_conversations:
        log.info(
            "No request count or conversation count provided; defaulting --num-conversations "
            "to %d (run each root in the file once). Use --request-count for a literal "
            "wire-request cap instead.",
            resolved.num_conversations,
        )
    return graph, resolved


def _read_options(
    parser: argparse.ArgumentParser, args: argparse.Namespace, load: LoadConfig
) -> ReadOptions:
    """What a run's flags tell the formats that read more than their file: random_pool draws
    as many requests as AIPerf sizes its pool (--num-conversations, else --request-count),
    seeded by --random-seed; sharegpt counts tokens with --tokenizer; agent traces build
    prompts in its tokens."""
    takes = FORMATS[args.custom_dataset_type].takes
    count_tokens = tokenizer_json = None
    if {"count_tokens", "tokenizer_json"} & set(takes) and args.tokenizer is not None:
        from dagperf.vocabulary.tokens import TokenCounter, TokenizerError, read_tokenizer

        try:
            tokenizer_json = read_tokenizer(args.tokenizer)
        except TokenizerError as e:
            parser.error(f"--tokenizer: {e}")
        count_tokens = TokenCounter(tokenizer_json).count_all
    draws = load.num_conversations or load.request_count
    return ReadOptions(
        draws=draws,
        seed=load.random_seed,
        count_tokens=count_tokens,
        tokenizer_json=tokenizer_json,
        think_time_only=args.use_think_time_only,
    )


def endpoint_fields(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    fields = {
        "url": args.url,
        "model": args.model,
        "endpoint_type": args.endpoint_type,
        "endpoint": args.endpoint,
        "streaming": args.streaming,
        "api_key": args.api_key or os.environ.get("OPENAI_API_KEY") or None,
        "extra_inputs": _format_inputs(args) | _extra_inputs(parser, args.extra_inputs),
        "request_timeout_seconds": args.request_timeout_seconds,
        "session_affinity_headers": _affinity_headers(args.session_affinity_header),
        "backend_headers": args.backend_header,
    }
    kind, only = args.custom_dataset_type, FORMATS[args.custom_dataset_type].endpoint_type
    if only is not None and args.endpoint_type != only:
        parser.error(
            f"--custom-dataset-type {kind}: its lines are {only} request bodies; "
            f"use --endpoint-type {only}"
        )
    try:  # check the flags now, with stand-ins for what is only known once a server runs
        EndpointConfig(**(fields | {"url": args.url or "127.0.0.1", "model": args.model or "-"}))
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        field = str(first["loc"][0] if first["loc"] else "url")
        flag = "--" + FLAG_OF_FIELD.get(field, field).replace("_", "-")
        parser.error(f"{flag}: {first['msg'].removeprefix('Value error, ')}")
    return fields


def _format_inputs(args: argparse.Namespace) -> dict[str, Any]:
    """The body fields the dataset's format asks for (an agent trace's ignore_eos), on the
    APIs whose servers take them; --extra-inputs wins over them."""
    if args.endpoint_type not in ("chat", "completions"):
        return {}
    return dict(FORMATS[args.custom_dataset_type].extra_inputs)


def _affinity_headers(names: list[str] | None) -> list[str]:
    """The flag's names, the defaults without it; an empty name (`''`) sends none."""
    if names is None:
        return list(AFFINITY_HEADERS)
    return [name for name in names if name]


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


def artifact_dir_for(args: argparse.Namespace, load: LoadConfig) -> Path:
    """--artifact-dir, said when it already holds files (they are overwritten, as AIPerf's
    are: the user named it); else a default of its own that no earlier run used."""
    if args.artifact_dir is not None:
        named = Path(args.artifact_dir)
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
    return unused_default(args, f"{args.endpoint_type}-{shape}")


def unused_default(args: argparse.Namespace, kind: str) -> Path:
    """artifacts/<dataset>-<kind>, or with the first numeric suffix (-2, -3, ...) that no
    earlier run has used: a second run never writes over the first's default directory."""
    name = Path(shown(args.session_config or args.input_file or "run")).name.split(".")[0]
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


def recorded_inputs(
    args: argparse.Namespace, load: LoadConfig, workers: int, options: dict[str, Any]
) -> dict[str, Any]:
    return {
        "dataset": {"path": shown(str(args.input_file)), "type": args.custom_dataset_type}
        if args.input_file
        else {"path": str(args.session_config), "type": "synthetic"},
        "load": load.model_dump(mode="json"),
        "workers": workers,
        "tokenizer": str(Path(args.tokenizer).resolve()) if args.tokenizer else None,
        "goodput": options["goodput"],
        "max_error_rate": options["max_error_rate"],  # what the run (and its health) judged on
    }


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
