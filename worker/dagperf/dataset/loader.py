"""What every dataset format's reader shares: problems located by file and line, reading a file
plain or gzip-compressed, numbered JSON lines, and pydantic's errors worded for a user.

Problems are collected rather than raised, up to `MAX_PROBLEMS`, because a user fixing a
generated file wants the whole list, not one error per run.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from pydantic import BaseModel, ValidationError

from dagperf.dataset.limits import line_problem
from dagperf.dataset.progress import reading_progress
from dagperf.runtime.gcpause import gc_paused

MAX_PROBLEMS = 100
_GZIP_MAGIC = b"\x1f\x8b"
#: The tags a format's discriminated unions add to error locations (dag_jsonl's branch entries:
#: a bare session id or an object; an orchestrator's rounds: a count or a list); they are not
#: keys in the file, so messages leave them out.
BARE, OBJECT = "bare", "object"
COUNT, LIST = "<count>", "<list>"
UNION_TAGS = frozenset({BARE, OBJECT})
STOPPED_READING = (
    f"too many problems: stopped reading here after {MAX_PROBLEMS}; fix these and validate again"
)


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a dataset, located by file and line."""

    source: str
    line: int | None
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.message}" if self.line else self.short()

    def short(self) -> str:
        """The form without the file name, as `line N: message`."""
        return (
            f"line {self.line}: {self.message}" if self.line else f"{self.source}: {self.message}"
        )


class DatasetError(Exception):
    """A dataset that cannot be run; `problems` lists every reason found, in line order."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
Reader = Callable[[Iterable[bytes], str], T]


def load_file(path: str | Path, read: Reader[T], source: str | None = None) -> T:
    """Read a dataset file (plain or gzip-compressed) with a format's `read`; raise
    `DatasetError` if it cannot be run. Problems name `source` (default: the path)."""
    source = source or str(path)
    try:
        with open(path, "rb") as f, reading_progress(f, source):
            return parse_stream(f, source, read)
    except OSError as e:  # missing, a directory, unreadable
        raise DatasetError([Problem(source, None, f"cannot read: {e.strerror or e}")]) from None


def read_files(files: list[Path], read: Callable[[BinaryIO, Problems], T]) -> list[tuple[Path, T]]:
    """Each file read with `read` (a directory's files, one dataset), every file's problems
    found before any is raised."""
    found: list[Problem] = []
    out = []
    with gc_paused():
        for path in files:
            problems = Problems(str(path))
            try:
                with path.open("rb") as f:
                    out.append((path, read(f, problems)))
            except OSError as e:
                problems.add(None, f"cannot read: {e.strerror or e}")
            except DatasetError as e:  # one file past the problem cap
                found += e.problems
                continue
            found += problems.items
    if found:
        raise DatasetError(found)
    return out


def parse_stream(stream: BinaryIO, source: str, read: Reader[T]) -> T:
    """Read a dataset from a seekable binary stream, plain or gzip-compressed (told apart by its
    first bytes, as a ConfigMap's binaryData does not say)."""
    compressed = stream.read(2) == _GZIP_MAGIC
    stream.seek(0)
    try:
        if compressed:
            with gzip.GzipFile(fileobj=stream) as unpacked:
                return read(unpacked, source)
        return read(stream, source)
    except OSError as e:  # unreadable, or a corrupt gzip stream
        raise DatasetError([Problem(source, None, f"cannot read: {e.strerror or e}")]) from None
    except EOFError:
        raise DatasetError([Problem(source, None, "cannot read: truncated gzip stream")]) from None


def jsonl_lines(lines: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    """Numbered non-blank lines, stripped, without a leading byte-order mark."""
    for lineno, raw in enumerate(lines, start=1):
        if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]  # a UTF-8 byte-order mark, as spreadsheet exports write
        raw = raw.strip()
        if raw:
            yield lineno, raw


def validated_lines(
    lines: Iterable[bytes], model: type[M], problems: Problems, unit: str
) -> Iterator[tuple[int, bytes, M | None]]:
    """Numbered non-blank lines, each validated as one `model`; a line that is not one has its
    problems added (`unit` says what a line should hold) and comes with None."""
    for lineno, raw in jsonl_lines(lines):
        row: M | None = None
        if (unsafe := line_problem(raw)) is not None:
            problems.add(lineno, unsafe)
            yield lineno, raw, row
            continue
        try:
            row = model.model_validate_json(raw)
        except ValidationError as e:
            for message in describe(e, raw, unit=unit):
                problems.add(lineno, message)
        yield lineno, raw, row


def object_lines(
    numbered: Iterable[tuple[int, bytes]], problems: Problems, unit: str
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Numbered lines that are JSON objects, as dicts, for formats that read their fields
    loosely (Veeksha's traces ignore unknown keys); any other line has its problem added."""
    for lineno, raw in numbered:
        if (unsafe := line_problem(raw)) is not None:
            problems.add(lineno, unsafe)
            continue
        try:
            row = json.loads(raw)
        except ValueError as e:
            problems.add(lineno, f"invalid JSON: {e}")
            continue
        if not isinstance(row, dict):
            problems.add(lineno, f"expected a JSON object ({unit})")
            continue
        yield lineno, row


class Problems:
    """Problems of one file as they are found, stopping the read past `MAX_PROBLEMS`."""

    def __init__(self, source: str):
        self.source = source
        self.items: list[Problem] = []

    def add(self, line: int | None, message: str) -> None:
        self.items.append(Problem(self.source, line, message))
        if len(self.items) >= MAX_PROBLEMS:
            raise DatasetError(capped(self.items, Problem(self.source, line, STOPPED_READING)))

    def raise_any(self) -> None:
        if self.items:
            self.items.sort(key=lambda p: p.line or 0)
            raise DatasetError(self.items)


def capped(problems: list[Problem], note: Problem) -> list[Problem]:
    return [*problems[:MAX_PROBLEMS], note]


def describe(
    error: ValidationError, raw: bytes, suffix: str = "", unit: str = "one conversation per line"
) -> Iterator[str]:
    """Render pydantic's errors as `path: what is wrong`, `suffix` naming what failed."""
    for err in error.errors(include_url=False):
        loc = [part for i, part in enumerate(err["loc"]) if not _is_union_tag(err["loc"], i)]
        kind = err["type"]
        if kind == "json_invalid":
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                byte = raw[e.start]
                yield f"invalid JSON: not UTF-8 text (byte 0x{byte:02x} at offset {e.start})"
            else:
                yield f"invalid JSON: {err['msg'].removeprefix('Invalid JSON: ')}"
        elif not loc and kind == "model_type":
            yield (f"expected a JSON object ({unit}), got {_json_type(err.get('input'))}")
        else:
            path = ".".join(str(part) for part in loc)
            message = err["msg"].removeprefix("Value error, ")
            yield f"{path}: {message}{suffix}" if path else f"{message}{suffix}"


def _is_union_tag(loc: tuple[Any, ...], i: int) -> bool:
    if loc[i] in (COUNT, LIST):  # no key of a file is written so
        return True
    return loc[i] in UNION_TAGS and i > 0 and isinstance(loc[i - 1], int)


def _json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")
