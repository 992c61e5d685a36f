"""The `dagperf` command: one subcommand per role or tool, each a thin shell over a library call.

Flags follow `aiperf profile` where a concept is shared. The load flags are generated from
`LoadConfig`, the health tolerances' from `HealthOptions` and the simulator's from `SimConfig`
(`flags`), so a flag and the model it fills cannot drift apart.

- `flags`: flags generated from pydantic models, and the flags every role shares (keys, logs).
- `benchmark`: what every command that runs a benchmark takes and does (dataset, endpoint,
  output, metrics; the artifact directory; the verdict's exit code).
- `roles`: `profile` (all on this machine), `scheduler` and `worker`.
- `tools`: `validate`, `fetch`, `health`, `report`, `keys` and `simulate`.
- `usage`: the subcommands' parser: a mistyped flag is named with the flag it likely meant.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from dagperf import __version__
from dagperf.cli.roles import add_profile, add_scheduler, add_worker
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
