"""Read a dag_jsonl file into validated conversations, or refuse it with every problem at once.

Lines are streamed, and each is read by msgspec into the compact form a run keeps
(`dag_lines`); only a line that fails is parsed a second time, by the pydantic models, to
word its problems and recover its session_id. Problems are collected rather than raised, up to
`MAX_PROBLEMS`, because a user fixing a generated file wants the whole list, not one error per
run.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import msgspec
from pydantic import ValidationError

from dagperf.dataset.dag_jsonl import DagConversation
from dagperf.dataset.dag_lines import Conversation, Interned, Read, read_line
from dagperf.dataset.limits import line_problem, suspect_digits, too_deep
from dagperf.dataset.loader import (
    MAX_PROBLEMS,
    STOPPED_READING,
    DatasetError,
    Problem,
    capped,
    describe,
    jsonl_lines,
    load_file,
    parse_stream,
)
from dagperf.dataset.rules import conversation_problems, file_problems
from dagperf.runtime.gcpause import gc_paused

_SESSION_ID = re.compile(rb'"session_id"\s*:\s*"([^"\\]{1,200})"')
_BATCH_BYTES = 1 << 20
_STOPPED_CHECKING = (
    f"too many problems: stopped checking after {MAX_PROBLEMS}; fix these and validate again"
)


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


def load_dag_jsonl(path: str | Path) -> DagDataset:
    return load_file(path, read_dag_jsonl)


def parse_dag_jsonl(stream: BinaryIO, source: str) -> DagDataset:
    return parse_stream(stream, source, read_dag_jsonl)


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

    for batch, numbers in _batches(lines):
        seen_a_line = True
        for lineno, raw in batch:
            fast = None if line_problem(raw, numbers) else read_line(raw, intern)
            read = read_slowly(raw, intern) if fast is None else fast
            if isinstance(read, list):
                sid = _session_id_of(raw)
                if sid is not None:
                    unparsed.add(sid)
                for message in read:
                    report(lineno, message + (f" (session '{sid}')" if sid else ""))
            elif (sid := read.record.session_id) in conversations:
                first = line_of[sid]
                report(lineno, f"duplicate session_id '{sid}' (first declared on line {first})")
            else:
                conversations[sid] = read.conversation
                line_of[sid] = lineno
                if read.checks:  # a line that branches, or sends more than one turn
                    for message in conversation_problems(read.record, read.system):
                        report(lineno, message)
            if len(problems) >= MAX_PROBLEMS:
                raise DatasetError(capped(problems, Problem(source, lineno, STOPPED_READING)))

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
            raise DatasetError(capped(problems, Problem(source, None, _STOPPED_CHECKING)))
        raise DatasetError(problems)
    return DagDataset(source, conversations, line_of)


def _batches(lines: Iterable[bytes]) -> Iterator[tuple[list[tuple[int, bytes]], bool]]:
    """Numbered non-blank lines in batches of about a megabyte, each with whether its numbers
    still need a check: the check runs on a batch at once (one pass over bytes, not one call per
    line), and only the lines of a batch it does not clear are checked one by one. A stream is
    read a block at a time and split in C; other line sources go line by line."""
    if not isinstance(lines, io.IOBase):
        numbered = list(jsonl_lines(lines))
        if numbered:
            yield numbered, suspect_digits(b"\n".join(raw for _, raw in numbered))
        return
    lineno, rest = 1, b""
    while block := lines.read(_BATCH_BYTES):
        whole, newline, rest = (rest + block).rpartition(b"\n")
        if newline:  # `whole` ends lines; `rest` is the start of the next
            if numbered := _numbered(whole, lineno):
                yield numbered, suspect_digits(whole)
            lineno += whole.count(b"\n") + 1
    if numbered := _numbered(rest, lineno):
        yield numbered, suspect_digits(rest)


def _numbered(block: bytes, first: int) -> list[tuple[int, bytes]]:
    """The block's non-blank lines, stripped, with their numbers."""
    if first == 1:
        block = block.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark, as some tools write
    return [(n, line) for n, line in enumerate(map(bytes.strip, block.split(b"\n")), first) if line]


def read_slowly(raw: bytes, intern: Interned) -> Read | list[str]:
    """A line the fast reader refused, or that may hold numbers a server cannot read: its
    problems in the models' words, or, when the models accept it after all (a key written
    twice, the last value good, which the structs refuse), the line as the models read it."""
    if (unsafe := line_problem(raw)) is not None:
        return [unsafe]
    try:
        conversation = DagConversation.model_validate_json(raw)
    except ValidationError as e:
        return list(describe(e, raw))
    canonical = msgspec.json.encode(conversation.model_dump(exclude_defaults=True))
    read = read_line(canonical, intern)
    return ["cannot be read as the models read it"] if read is None else read


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
