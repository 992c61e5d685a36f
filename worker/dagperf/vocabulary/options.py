"""How a run option surfaces: the one declaration each option has, and its rendering as flags.

A run option is a field of one flat pydantic model per concern (the endpoint, the dataset, the
load, the health checks, the verdict, repeats and time slices, a search, the output). The field
holds its type, default, bounds and help; an `Option` in its `Annotated` metadata holds what
only the surfaces need: the flag's name and value name, and the Benchmark field's name, or why
a Benchmark has none (`local`). From these come the CLI's flags (`dagperf.cli.flags`), the
Benchmark CRD's sections (the operator's spec), the scheduler pod's argv (`as_flags`), and the
generated docs. Adding an option is adding one field.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo


@dataclass(frozen=True)
class Option:
    """What a field's surfaces need beyond its type, default and description."""

    flag: str | None = None  # the flag's name without `--`, where it is not the field's
    aliases: tuple[str, ...] = ()  # other names the flag answers to (`-m`, `--session-rate`)
    metavar: str | None = None  # the value's name in the help (default: the field's, upper)
    # Why a Benchmark has no field for it (the built-in simulator's knobs, listening ports,
    # console output, or a Benchmark section that says it another way); None: it has one.
    local: str | None = None
    benchmark: str | None = None  # the Benchmark field's snake_case name, where not the field's
    benchmark_default: Any = None  # a Benchmark's default, where it differs (and why: `help`)
    # Flag text to value: one occurrence of a repeatable flag (a list's item, a dict to merge),
    # or the whole value; and back, for the pod's argv. Default: the field's scalar type, str.
    parse: Callable[[str], Any] | None = None
    render: Callable[[Any], str] | None = None
    env: str | None = None  # an environment variable that sets the default (not for secrets)
    # From a table filled at import time (the APIs': a plug-in's counts): the flag's choices,
    # and what they are, after its help.
    choices: Callable[[], tuple[str, ...]] | None = None
    described: Callable[[], str] | None = None


PLAIN = Option()


def option(field: FieldInfo) -> Option:
    return next((m for m in field.metadata if isinstance(m, Option)), PLAIN)


def options(model: type[BaseModel]) -> Iterator[tuple[str, FieldInfo, Option]]:
    for name, field in model.model_fields.items():
        yield name, field, option(field)


def flag_name(name: str, field: FieldInfo, prefix: str = "") -> str:
    return f"--{prefix}{option(field).flag or name.replace('_', '-')}"


def scalar(annotation: Any) -> Any:
    """int for `int | None`, list for `list[str]`, and so on."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    origin = typing.get_origin(annotation)
    return origin if origin in (list, dict) else annotation


def item_type(annotation: Any) -> Any:
    """str for `list[str] | None`: what one occurrence of a repeatable flag gives."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    args = typing.get_args(annotation)
    return args[0] if args else str


def default_of(field: FieldInfo) -> Any:
    """Its default; None for a field that has none (a required one)."""
    return None if field.is_required() else field.get_default(call_default_factory=True)


def as_flags(
    values: BaseModel, prefix: str = "", local: bool = False, always: Collection[str] = ()
) -> list[str]:
    """The flags that give these options: one per option not at its default (those `always`
    names: at it too), spelled as the CLI generates them from the same model (a list as a
    repeated flag, a list emptied of its default as the flag given ''), so parsing them back
    gives `values` again. Local-only options only when asked: a Benchmark's pods get theirs from the
    operator itself."""
    out: list[str] = []
    for name, field, opt in options(type(values)):
        value = getattr(values, name)
        if value is None or (value == default_of(field) and name not in always):
            continue
        if opt.local and not local:
            continue
        flag = flag_name(name, field, prefix)
        render = opt.render or str
        if isinstance(value, bool):
            out.append(flag if value else f"--no-{flag[2:]}")
        elif isinstance(value, list) and opt.render is None:
            out += [part for item in value for part in (flag, str(item))] or [flag, ""]
        else:
            out += [flag, render(value)]
    return out
