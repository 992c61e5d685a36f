"""Read a dag_jsonl file into validated conversations, or refuse it with every problem at once.

Lines are streamed: nothing but the parsed models is kept, so a file of a million conversations
costs its models and no more. Each line is parsed by pydantic's Rust JSON validator in one step
(the fast path); only a line that fails is parsed a second time, to recover its session_id for
the message. Problems are collected rather than raised, up to `MAX_PROBLEMS`, because a user
fixing a generated file wants the whole list, not one error per run.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from pydantic import BaseModel, ValidationError

from dagperf.dataset.dag_jsonl import UNION_TAGS, DagConversation
from dagperf.dataset.dag_lines import Conversation, Interned, read_line
from dagperf.dataset.limits import line_problem, suspect_number, too_deep
from dagperf.dataset.progress import reading_progress
from dagperf.dataset.rules import conversation_problems, file_problems
from dagperf.runtime.gcpause import gc_paused

MAX_PROBLEMS = 100
_SESSION_ID = re.compile(rb'"session_id"\s*:\s*"([^"\\]{1,200})"')
_GZIP_MAGIC = b"\x1f\x8b"
_BATCH_BYTES = 1 << 20
_STOPPED_READING = (
    f"too many problems: stopped reading here after {MAX_PROBLEMS}; fix these and validate again"
)
_STOPPED_CHECKING = (
    f"too many problems: stopped checking after {MAX_PROBLEMS}; fix these and validate again"
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


@dataclass
class DagDataset:
    """A validated dag_jsonl file: conversations in file order and the line each came from."""

    source: str
    conversations: dict[str, Conversation]
    lines: dict[str, int]
    roots: list[str] = field(init=False)

    def __post_init__(self) -> None:
        referenced = {
            child
            for conversation in self.conversations.values()
            for b in conversation.branches
            for child in b.children
        }
        self.roots = [sid for sid in self.conversations if sid not in referenced]


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


def load_dag_jsonl(path: str | Path) -> DagDataset:
    return load_file(path, read_dag_jsonl)


def parse_dag_jsonl(stream: BinaryIO, source: str) -> DagDataset:
    return parse_stream(stream, source, read_dag_jsonl)


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
            raise DatasetError(_capped(self.items, Problem(self.source, line, _STOPPED_READING)))

    def raise_any(self) -> None:
        if self.items:
            self.items.sort(key=lambda p: p.line or 0)
            raise DatasetError(self.items)


def read_dag_jsonl(lines: Iterable[bytes], source: str) -> DagDataset:
    """Validate dag_jsonl content given as byte lines; `source` names it in messages."""
    with gc_paused():
        return _read(lines, source)


def _read(lines: Iterable[bytes], source: str) -> DagDataset:
    problems: list[Problem] = []
    conversations: dict[str, Conversation] = {}
    line_of: dict[str, int] = {}
    unparsed: set[str] = set()
    intern = Interned()
    seen_a_line = False

    def report(line: int | None, message: str) -> None:
        problems.append(Problem(source, line, message))

    for lineno, raw, numbers in _checked_numbers(jsonl_lines(lines)):
        seen_a_line = True
        read = None if (unsafe := line_problem(raw, numbers)) else read_line(raw, intern)
        if read is None:
            sid = _session_id_of(raw)
            if sid is not None:
                unparsed.add(sid)
            for message in _line_problems(raw, unsafe, sid):
                report(lineno, message)
        elif (sid := read.record.session_id) in conversations:
            report(lineno, f"duplicate session_id '{sid}' (first declared on line {line_of[sid]})")
        else:
            conversations[sid] = read.conversation
            line_of[sid] = lineno
            for message in conversation_problems(read.record, read.system):
                report(lineno, message)
        if len(problems) >= MAX_PROBLEMS:
            raise DatasetError(_capped(problems, Problem(source, lineno, _STOPPED_READING)))

    if not seen_a_line:
        report(None, "empty file: a dag_jsonl file needs at least one conversation line")
    # Whole-file rules still run when lines failed, so one pass shows everything; references to
    # a failed line's session are not reported as undeclared, since the line has its own error.
    for lineno, message in file_problems(conversations, line_of, unparsed):
        report(lineno, message)
        if len(problems) > MAX_PROBLEMS:
            break
    if problems:
        problems.sort(key=lambda p: p.line or 0)
        if len(problems) > MAX_PROBLEMS:
            raise DatasetError(_capped(problems, Problem(source, None, _STOPPED_CHECKING)))
        raise DatasetError(problems)
    return DagDataset(source, conversations, line_of)


def _checked_numbers(
    numbered: Iterable[tuple[int, bytes]],
) -> Iterator[tuple[int, bytes, bool]]:
    """The lines, each with whether its numbers still need a check: the check runs on about a
    megabyte of lines at once (one pass over bytes, not one call per line), and only lines of a
    batch it does not clear are checked one by one."""
    batch: list[tuple[int, bytes]] = []
    size = 0
    for item in numbered:
        batch.append(item)
        size += len(item[1])
        if size >= _BATCH_BYTES:
            yield from _numbers_of(batch)
            batch, size = [], 0
    yield from _numbers_of(batch)


def _numbers_of(batch: list[tuple[int, bytes]]) -> Iterator[tuple[int, bytes, bool]]:
    suspect = suspect_number(b"\n".join(raw for _, raw in batch))
    return ((lineno, raw, suspect) for lineno, raw in batch)


def _line_problems(raw: bytes, unsafe: str | None, sid: str | None) -> list[str]:
    """Why a line cannot be read, in the models' words."""
    suffix = f" (session '{sid}')" if sid else ""
    if unsafe is not None:
        return [unsafe + suffix]
    try:
        DagConversation.model_validate_json(raw)
    except ValidationError as e:
        return list(describe(e, raw, suffix))
    # The structs refused what the models accept: a disagreement the fuzz tests look for.
    return [f"cannot be read by the fast reader although it validates{suffix}"]


def _capped(problems: list[Problem], note: Problem) -> list[Problem]:
    return [*problems[:MAX_PROBLEMS], note]


def _session_id_of(raw: bytes) -> str | None:
    if too_deep(raw):  # json.loads would recurse past the stack: the first one named will do
        found = _SESSION_ID.search(raw)
        return found.group(1).decode("utf-8", "replace") if found else None
    try:
        obj = json.loads(raw)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError alike
        return None
    sid = obj.get("session_id") if isinstance(obj, dict) else None
    return sid if isinstance(sid, str) and sid else None


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
    return loc[i] in UNION_TAGS and i > 0 and isinstance(loc[i - 1], int)


def _json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")
