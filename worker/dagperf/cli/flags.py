"""Flags generated from pydantic models (one per field, its description as the help), and the
flags every role shares: the key directory and the log format."""

from __future__ import annotations

import argparse
import os
import typing
from pathlib import Path
from typing import Any, TypeAlias, TypeVar

from pydantic import BaseModel, ValidationError

from dagperf.cli.usage import CommandParser
from dagperf.options.output import LogOptions
from dagperf.vocabulary.keys import KEYS_ENV, KeysError
from dagperf.vocabulary.options import default_of, flag_name, item_type, options, scalar

M = TypeVar("M", bound=BaseModel)

Commands: TypeAlias = "argparse._SubParsersAction[CommandParser]"  # add_subparsers'


def keys_flag(group: Any, holding: str, otherwise: str = "") -> None:
    group.add_argument(
        "--keys",
        metavar="DIR",
        type=Path,
        default=Path(os.environ[KEYS_ENV]) if os.environ.get(KEYS_ENV) else None,
        help=f"the key directory `dagperf keys` wrote: {holding} (default: ${KEYS_ENV}"
        f"{otherwise}); the wire is always CURVE-authenticated and encrypted",
    )


def role_keys(parser: argparse.ArgumentParser, args: argparse.Namespace, load: Any) -> Any:
    if args.keys is None:
        parser.error("--keys DIR is required (make a key set with `dagperf keys DIR`)")
    try:
        return load(args.keys)
    except KeysError as e:
        parser.error(f"--keys: {e}")


def log_flags(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser, LogOptions, "logs")


def add_model_flags(
    parser: argparse.ArgumentParser,
    model: type[BaseModel],
    title: str,
    prefix: str = "",
    required: tuple[str, ...] = (),
    defaults: dict[str, Any] | None = None,
) -> None:
    """One flag per field of a flat options model (`dagperf.vocabulary.options`): its
    description as the help, its default shown (`defaults`: a command's own); a list or a map
    as a repeatable flag."""
    group = parser.add_argument_group(title)
    for name, field, opt in options(model):
        flag = flag_name(name, field, prefix)
        names = (flag, *(opt.aliases if not prefix else ()))
        dest = f"{prefix.replace('-', '_')}{name}"
        kind = scalar(field.annotation)
        default = (defaults or {}).get(name, default_of(field))
        help_text = (field.description or "") + (f": {opt.described()}." if opt.described else "")
        help_text = help_text.replace("%", "%%")
        if kind is bool:
            if opt.env and os.environ.get(opt.env, "").lower() in ("1", "true", "yes"):
                default = True
            action = argparse.BooleanOptionalAction
            group.add_argument(*names, dest=dest, action=action, default=default, help=help_text)
            continue
        choices = opt.choices() if opt.choices else None
        if typing.get_origin(kind) is typing.Literal:
            choices, kind = typing.get_args(kind), str
        many = kind in (list, dict)  # repeatable: each occurrence an item, or a map to merge
        if default not in (None, [], {}):
            shown = ", ".join(map(str, default)) if kind is list else "%(default)s"
            help_text += f" (default: {shown})"
        group.add_argument(
            *names,
            dest=dest,
            required=name in required or field.is_required(),
            action="append" if many else "store",
            type=_typed(opt.parse) if opt.parse else _item_or(field.annotation, many, kind),
            choices=choices,
            default=None if many else default,
            metavar=None if choices else opt.metavar or name.upper(),
            help=help_text,
        )


def _item_or(annotation: Any, many: bool, kind: Any) -> Any:
    return item_type(annotation) if many else kind


def _typed(parse: Any) -> Any:
    """A parse function's ValueError as argparse's own complaint about the flag's value."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return convert


def model_from_flags(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    model: type[M],
    prefix: str = "",
    **given: Any,
) -> M:
    """The options the flags give (a flag not given: the field's default), or a usage error
    naming the flag at fault. `given`: fields the command sets itself."""
    values: dict[str, Any] = {}
    for name, field, _ in options(model):
        value = getattr(args, prefix + name)
        if isinstance(value, list) and scalar(field.annotation) is dict:
            value = {k: v for part in value for k, v in part.items()}
        elif isinstance(value, list):  # a parse may give several items (`--slo "a b"`)
            items = [i for part in value for i in (part if isinstance(part, list) else [part])]
            value = [item for item in items if item != ""]  # `--flag ''`: none at all
        if value is not None:
            values[name] = value
    try:
        return model(**(values | given))
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        message = first["msg"].removeprefix("Value error, ")
        if not first["loc"]:  # a rule across fields: its message names them
            parser.error(message)
        field_name = str(first["loc"][0])
        info = model.model_fields.get(field_name)
        flag = flag_name(field_name, info, prefix.replace("_", "-")) if info else field_name
        parser.error(f"{flag}: {message}")


def default_workers() -> int:
    return max(1, min(8, (os.cpu_count() or 2) // 2))
