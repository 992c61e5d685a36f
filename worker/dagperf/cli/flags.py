"""Flags generated from pydantic models (one per field, its description as the help), and the
flags every role shares: the key directory and the log format."""

from __future__ import annotations

import argparse
import os
import types
import typing
from pathlib import Path
from typing import Any, TypeAlias

from pydantic import BaseModel, ValidationError

from dagperf.cli.usage import CommandParser
from dagperf.runtime.logs import LOG_FORMATS
from dagperf.vocabulary.keys import KEYS_ENV, KeysError

ENV_DEFAULTS = {"fail_fast": "DAGPERF_DAG_FAIL_FAST"}  # flags whose default an env var sets
# Flags that also answer to another name: a rate of roots is a session rate.
FLAG_ALIASES = {"request_rate": ("--session-rate",)}


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
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="text, or JSON lines for CI and pods (default: %(default)s)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,  # `debug` as well as `DEBUG`, as logging's own names are written
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="the least severe log lines shown, on stderr (default: %(default)s)",
    )


def add_model_flags(
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
            choices = typing.get_args(kind) if typing.get_origin(kind) is typing.Literal else None
            group.add_argument(
                flag,
                *(FLAG_ALIASES.get(name, ()) if not prefix else ()),
                dest=dest,
                type=str if choices else kind,
                choices=choices,
                default=field.default,
                metavar=None if choices else name.upper(),
                help=f"{field.description}{shown}",
            )


def _scalar(annotation: Any) -> Any:
    """int for `int | None`, and so on."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return next(a for a in typing.get_args(annotation) if a is not type(None))
    return annotation


def model_from_flags(
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


def default_workers() -> int:
    return max(1, min(8, (os.cpu_count() or 2) // 2))
