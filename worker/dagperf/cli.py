"""The `dagperf` command: one subcommand per role, each a thin shell over a library call."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from dagperf import __version__
from dagperf.dataset import DatasetError, load_dag_jsonl
from dagperf.graph import SessionKind, compile_dag_jsonl
from dagperf.simulator import SimConfig, serve_simulator

DATASET_TYPES = ("dag_jsonl",)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args, parser)
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dagperf",
        description="Benchmark OpenAI-compatible LLM endpoints with DAG-shaped conversations.",
    )
    parser.add_argument("--version", action="version", version=f"dagperf {__version__}")
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")

    validate = commands.add_parser(
        "validate",
        help="check a dataset file and summarize it",
        description="Check a dataset file. Exit 0 with a summary, or 1 with every problem as "
        "FILE:LINE: message.",
    )
    validate.add_argument("file", metavar="FILE")
    validate.add_argument(
        "--custom-dataset-type",
        choices=DATASET_TYPES,
        default="dag_jsonl",
        help="the file's format (default: %(default)s)",
    )
    validate.add_argument("--json", action="store_true", help="print the summary as JSON")
    validate.set_defaults(run=_validate)

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
    _add_model_flags(simulate, SimConfig)
    simulate.set_defaults(run=_simulate)
    return parser


def _validate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        dataset = load_dag_jsonl(args.file)
        graph = compile_dag_jsonl(dataset)
    except DatasetError as e:
        for problem in e.problems:
            print(problem)
        print(f"{args.file}: invalid {args.custom_dataset_type}, {len(e.problems)} problem(s)")
        return 1
    summary = {
        "conversations": len(dataset.conversations),
        "roots": graph.root_count,
        "requests per run": graph.request_count,
        "max agent depth": graph.max_depth,
        "FORK children": graph.child_count(SessionKind.FORK),
        "SPAWN children": graph.child_count(SessionKind.SPAWN),
    }
    if args.json:
        keys = {name: name.lower().replace(" ", "_") for name in summary}
        print(json.dumps({"file": args.file} | {keys[k]: v for k, v in summary.items()}))
    else:
        print(f"{args.file}: valid {args.custom_dataset_type}")
        for name, value in summary.items():
            print(f"  {name:<18}{value:>10,}")
    return 0


def _simulate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    config = _model_from_flags(parser, args, SimConfig)
    serve_simulator(config, args.host, args.port)
    return 0


def _add_model_flags(parser: argparse.ArgumentParser, model: type[BaseModel]) -> None:
    """One flag per field of a flat pydantic model, with its description as the help."""
    for name, field in model.model_fields.items():
        flag = "--" + name.replace("_", "-")
        if field.annotation is bool:
            parser.add_argument(
                flag,
                action=argparse.BooleanOptionalAction,
                default=field.default,
                help=field.description,
            )
        else:
            parser.add_argument(
                flag,
                type=field.annotation,
                default=field.default,
                metavar=name.upper(),
                help=f"{field.description} (default: %(default)s)",
            )


def _model_from_flags(
    parser: argparse.ArgumentParser, args: argparse.Namespace, model: type[BaseModel]
) -> Any:
    try:
        return model(**{name: getattr(args, name) for name in model.model_fields})
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        parser.error(f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}")


if __name__ == "__main__":
    sys.exit(main())
