"""The `dagperf` command: one subcommand per role or tool, each a thin shell over a library call.

Flags follow `aiperf profile` where a concept is shared. A run's flags are generated from its
options models (`dagperf.options`, one per concern) and the simulator's from `SimConfig`, so a
flag and the model it fills cannot drift apart, nor a flag and its Benchmark field.

- `flags`: flags generated from pydantic models, and the flags every role shares (keys, logs).
- `run_options`: a run's flags, and the options they give, by concern.
- `plan`: what a run is from its options: its graph, its load, its endpoint, its settings.
- `artifacts`: where its files go; `outcome`: its summary, health checks and exit code.
- `local_run`: a run on this machine, its processes and plan (`profile`'s and `search`'s).
- `profile`, `search`: the commands on one machine; `roles`: `scheduler` and `worker`.
- `tools`: `validate`, `fetch`, `health`, `report`, `keys` and `simulate`.
- `usage`: the subcommands' parser: a mistyped flag is named with the flag it likely meant.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from dagperf import __version__
from dagperf.cli.profile import add_profile
from dagperf.cli.roles import add_scheduler, add_worker
from dagperf.cli.search import add_search
from dagperf.cli.tools import (
    add_fetch,
    add_health,
    add_keys,
    add_report,
    add_simulate,
    add_validate,
)
from dagperf.cli.usage import CommandParser
from dagperf.runtime import lifeline


def main(argv: Sequence[str] | None = None) -> int:
    lifeline.hold()  # a child of `dagperf profile` or of a worker pod's parent dies with it
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args, parser)
        return code
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dagperf",
        description="Benchmark OpenAI-compatible LLM endpoints with DAG-shaped conversations.",
    )
    parser.add_argument("--version", action="version", version=f"dagperf {__version__}")
    commands = parser.add_subparsers(
        title="commands", required=True, metavar="COMMAND", parser_class=CommandParser
    )
    add_profile(commands)
    add_search(commands)
    add_scheduler(commands)
    add_worker(commands)
    add_validate(commands)
    add_fetch(commands)
    add_health(commands)
    add_report(commands)
    add_keys(commands)
    add_simulate(commands)
    return parser
