"""The commands around a run: `validate` a dataset, `fetch` one from a URL, `health` of a
finished run, its `report`, `keys` for the roles, and `simulate` (the built-in simulated LLM on
its own)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from dagperf.cli.flags import Commands, add_model_flags, model_from_flags
from dagperf.cli.plan import read_graph
from dagperf.dataset.formats import FORMATS
from dagperf.fetch import FetchError, save, shown
from dagperf.health import HealthOptions, health_command
from dagperf.options import DatasetOptions
from dagperf.simulator import SimConfig
from dagperf.sources import summary
from dagperf.vocabulary.keys import FILES, KeySet


def add_validate(commands: Commands) -> None:
    validate = commands.add_parser(
        "validate",
        help="check a dataset file and summarize it",
        description="Check a dataset file. Exit 0 with a summary, or 1 with every problem as "
        "FILE:LINE: message.",
    )
    validate.add_argument(
        "input_file", metavar="FILE", nargs="?", help="a dataset file, or an http(s) URL of one"
    )
    validate.add_argument(
        "--sha256",
        dest="input_sha256",
        metavar="HEX",
        help="the SHA-256 the file must have (required for a URL)",
    )
    validate.add_argument(
        "--custom-dataset-type",
        choices=tuple(FORMATS),
        default="dag_jsonl",
        help="the file's format (default: %(default)s)",
    )
    validate.add_argument(
        "--session-config", metavar="FILE", help="check a synthetic session config instead"
    )
    validate.add_argument("--json", action="store_true", help="print the summary as JSON")
    validate.set_defaults(run=_validate)


def add_fetch(commands: Commands) -> None:
    fetch = commands.add_parser(
        "fetch",
        help="fetch a dataset file from a URL, its digest checked",
        description="Fetch an http(s) URL to PATH: written under a temporary name beside PATH "
        "and renamed to it only when its SHA-256 is HEX. Exit 0, or 1 with one line saying what "
        "went wrong; the URL is shown without its query (a presigned URL's signature is a "
        "credential). A Benchmark's scheduler pod runs it as its init container.",
    )
    source = fetch.add_mutually_exclusive_group(required=True)
    source.add_argument("url", metavar="URL", nargs="?", help="the file's http(s) URL")
    source.add_argument(
        "--url-env",
        metavar="NAME",
        help="read the URL from this environment variable (keeps it off the command line)",
    )
    fetch.add_argument(
        "--sha256", required=True, metavar="HEX", help="the SHA-256 the file must have"
    )
    fetch.add_argument(
        "-o", "--output", required=True, type=Path, metavar="PATH", help="where to write it"
    )
    fetch.set_defaults(run=_fetch)


def add_health(commands: Commands) -> None:
    health = commands.add_parser(
        "health",
        help="check a finished run's artifacts",
        description="Check a run from its artifact directory: no request sent before its "
        "dependencies finished (plus its delay) nor later than the slack, root sessions within "
        "the concurrency, the root rate within tolerance, ignore_eos replies as long as asked. "
        "Writes health_check.json there. Exit 0 when every check passed or was skipped, 1 when "
        "one failed, 2 when the artifacts cannot be read.",
    )
    health.add_argument(
        "artifact_dir", metavar="ARTIFACT_DIR", help="a finished run's artifact directory"
    )
    add_model_flags(health, HealthOptions, "tolerances")
    health.set_defaults(run=_health)


def add_report(commands: Commands) -> None:
    report = commands.add_parser(
        "report",
        help="write an HTML report of one run, or a comparison of several",
        description="Write one self-contained report.html (it opens offline): for one run the "
        "DAG timeline with each tree's critical path, latency distributions, throughput, the "
        "FORK siblings' prefix-cache effect, errors, health checks and configuration; for "
        "several, the same figures overlaid and each metric's change against the first run. "
        "One run's report goes into its directory unless --output says otherwise.",
    )
    report.add_argument(
        "run_dirs",
        metavar="RUN_DIR",
        nargs="+",
        type=Path,
        help="a finished run's artifact directory; several are compared in one report",
    )
    report.add_argument(
        "--output",
        type=Path,
        metavar="PATH",
        help="the file, or a directory for report.html (default: the run directory for one "
        "run, the current directory for several)",
    )
    report.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="NAME",
        help="a run's name in the report, once per RUN_DIR in order (default: its directory's "
        "name)",
    )
    report.set_defaults(run=_report)


def add_keys(commands: Commands) -> None:
    keys = commands.add_parser(
        "keys",
        help="make a key set for the scheduler and worker roles",
        description="Write a new CURVE key set and control token into DIR (created 0700, files "
        "0600): give the scheduler scheduler.public, scheduler.secret, worker.public and "
        "control.token; give each worker scheduler.public, worker.public and worker.secret; "
        "POST /stop needs control.token as a bearer token.",
    )
    keys.add_argument(
        "directory", metavar="DIR", type=Path, help="where to write the key set (made if absent)"
    )
    keys.add_argument("--force", action="store_true", help="replace a key set already there")
    keys.set_defaults(run=_keys)


def add_simulate(commands: Commands) -> None:
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
    simulate.add_argument(  # a listening socket dagperf profile bound, so it knew the URL first
        "--fd", type=int, help=argparse.SUPPRESS
    )
    add_model_flags(simulate, SimConfig, "simulator")
    simulate.set_defaults(run=_simulate)


def _keys(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    present = [name for name in FILES if (args.directory / name).exists()]
    if present and not args.force:
        print(
            f"dagperf: {args.directory} already holds keys ({', '.join(present)}); "
            "--force replaces them",
            file=sys.stderr,
        )
        return 1
    try:
        KeySet.generate().write(args.directory)
    except OSError as e:
        print(f"dagperf: cannot write keys to {args.directory}: {e.strerror}", file=sys.stderr)
        return 1
    print(f"wrote a key set to {args.directory}: {', '.join(FILES)}")
    return 0


def _validate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    dataset = DatasetOptions(
        input_file=args.input_file,
        input_sha256=args.input_sha256,
        custom_dataset_type=args.custom_dataset_type,
        session_config=args.session_config,
    )
    graph = read_graph(parser, dataset, out=sys.stdout)
    if graph is None:
        return 1
    name = args.session_config or shown(args.input_file)
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


def _fetch(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    url = args.url if args.url_env is None else os.environ.get(args.url_env, "")
    if not url:
        print(f"dagperf fetch: ${args.url_env} is not set", file=sys.stderr)
        return 1
    try:
        size = save(url, args.sha256, args.output)
    except FetchError as e:
        print(f"dagperf fetch: {e}", file=sys.stderr)
        return 1
    print(f"fetched {shown(url)} to {args.output} ({size:,} bytes, sha256 checked)")
    return 0


def _health(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    return health_command(args.artifact_dir, model_from_flags(parser, args, HealthOptions))


def _report(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dagperf.report import ReportError, write_report

    try:
        path = write_report(args.run_dirs, args.output, args.label)
    except ReportError as e:
        print(f"dagperf report: {e}", file=sys.stderr)
        return 1
    print(f"Report: {path}")
    return 0


def _simulate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dagperf.simulator import serve_simulator

    config = model_from_flags(parser, args, SimConfig)
    serve_simulator(config, args.host, args.port, args.fd)
    return 0
