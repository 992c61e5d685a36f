"""The parser every subcommand uses, for errors a newcomer can act on.

argparse hands a subcommand's unknown flags up to the top-level parser, which then prints the
top-level usage: `dagperf profile --concurency 4` would say nothing about `profile` nor about
`--concurrency`. Here the subcommand refuses them itself, naming the closest flag it has. Its
usage on an error is one line that points at --help: `profile` alone has some 80 flags, and
their usage block would bury the one line that says what went wrong.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from typing import Any

_CLOSE_ENOUGH = 0.75  # difflib's ratio: one or two letters off in a flag of ten


class CommandParser(argparse.ArgumentParser):
    def parse_known_args(  # type: ignore[override]  # typeshed overloads the namespace
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(self.unrecognized(extras))
        return parsed, extras

    def unrecognized(self, extras: list[str]) -> str:
        """The message for arguments this command does not take, with the flag each mistyped
        one most likely meant."""
        message = f"unrecognized argument{'s' if len(extras) > 1 else ''}: {' '.join(extras)}"
        for extra in extras:
            if extra.startswith("--") and (meant := self.closest_flag(extra.split("=", 1)[0])):
                message += f" (did you mean {meant}?)"
                break
        return message

    def closest_flag(self, flag: str) -> str | None:
        known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        close = difflib.get_close_matches(flag, known, n=1, cutoff=_CLOSE_ENOUGH)
        return close[0] if close else None

    def format_usage(self) -> str:
        positionals = [_shown(a) for a in self._actions if not a.option_strings]
        line = " ".join([self.prog, "[options]", *positionals])
        return f"usage: {line}  (`{self.prog} --help` lists every option)\n"


def _shown(action: argparse.Action) -> str:
    name = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    if action.nargs == "?":
        return f"[{name}]"
    if action.nargs == "*":
        return f"[{name} ...]"
    if action.nargs == "+":
        return f"{name} [{name} ...]"
    return name
