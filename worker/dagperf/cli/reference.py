"""The flag reference, docs/cli.md, written from the parser itself.

`python -m dagperf.cli.reference > docs/cli.md` writes it; a test checks the committed file is
what the parser says today, so a flag cannot be added, renamed or re-documented without the
reference following. Every subcommand gets its description, its usage line and one table per
argument group: the flag's spellings, its value, its default and its help.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator

from dagperf.cli import build_parser

INTRO = """\
# Command-line reference

Generated from the parser (`python -m dagperf.cli.reference > docs/cli.md`); a test keeps it
current. `dagperf COMMAND --help` prints the same. Load flags are generated from the same model
as the Benchmark's `spec.load` (the flag's name in camelCase); the exit codes are in the
[README](../README.md#exit-codes). The flags by topic, with what they do together:
[running.md](running.md).
"""


def reference(parser: argparse.ArgumentParser) -> str:
    lines = [INTRO]
    for name, command in _commands(parser):
        lines.append(f"## `dagperf {name}`\n")
        if command.description:
            lines.append(_one_paragraph(command.description) + "\n")
        lines.append(f"```\n{command.format_usage().strip()}\n```\n")
        for group in command._action_groups:
            formatter = command._get_formatter()
            shown = [a for a in group._group_actions if a.help != argparse.SUPPRESS]
            rows = [row for a in shown if (row := _row(a, formatter)) is not None]
            if not rows:
                continue
            lines.append(f"### {group.title}\n")
            lines.append("| flag | value | default | what it does |")
            lines.append("|---|---|---|---|")
            lines.extend(rows)
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _commands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, command in action.choices.items():
                if id(command) not in seen:  # an alias names the same parser again
                    seen.add(id(command))
                    yield name, command


def _row(action: argparse.Action, formatter: argparse.HelpFormatter) -> str | None:
    if isinstance(action, argparse._HelpAction):
        return None
    names = ", ".join(f"`{o}`" for o in action.option_strings)
    names = names or f"`{action.metavar or action.dest}`"
    value = _value(action)
    default = action.default
    shown = "" if default in (None, argparse.SUPPRESS, [], False) else f"`{default}`"
    text = _one_paragraph(formatter._expand_help(action) if action.help else "")
    text = text.replace("|", "\\|")
    if action.choices and not isinstance(action, argparse._SubParsersAction):
        text += " (one of " + ", ".join(f"`{c}`" for c in action.choices) + ")"
    return f"| {names} | {value} | {shown} | {text} |"


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    repeat = " (repeatable)" if isinstance(action, argparse._AppendAction) else ""
    return f"`{metavar}`{repeat}"


def _one_paragraph(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":
    sys.stdout.write(reference(build_parser()))
