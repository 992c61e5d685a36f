"""One pass over a dag_jsonl file, or a range of it, a megabyte at a time.

A block is taken whole when msgspec decodes all its lines in one call and nothing in it needs a
look line by line (a number that may not fit 64 bits, a line with many brackets, a blank line,
an escaped character, a session twice): numpy finds its line spans, and Python touches a
record only to see whether it branches, sends several turns or sets an `extra`; a line of one
turn forking to bare session ids, the common branching line, is filed in bulk too. Any other
block is read line by line, and
a line the structs refuse is parsed again by the pydantic models, to word its problems and
recover its session_id. Problems are collected rather than raised, up to `MAX_PROBLEMS`,
because a user fixing a generated file wants the whole list.

What is kept of a line is small: where it lies (read again when a run reaches it,
`line_store`), its line number, its turn count and, for a conversation that starts others, its
branches as numbered edges (`edges`). The prompts stay in the file.
"""

from __future__ import annotations

import operator
from array import array
from collections.abc import Callable, Iterator, Sequence
from itertools import chain
from typing import Any, BinaryIO, NamedTuple

import msgspec
import numpy as np
from numpy.typing import NDArray

from dagperf.dataset.formats.dag_jsonl.block_bytes import BlockBytes
from dagperf.dataset.formats.dag_jsonl.edges import EdgeList, Edges
from dagperf.dataset.formats.dag_jsonl.line_store import LineStore, Spans
from dagperf.dataset.formats.dag_jsonl.lines import (
    check_line,
    check_lines,
    read_slowly,
    session_id_of,
    sets_messages,
    system_positions,
)
from dagperf.dataset.formats.dag_jsonl.records import (
    ConversationRecord,
    ForkRecord,
    PlainChecked,
    conversation_branches,
    whole,
)
from dagperf.dataset.formats.dag_jsonl.rules import Noted, conversation_problems, file_problems
from dagperf.dataset.limits import line_problem, suspect_digits
from dagperf.dataset.loader import MAX_PROBLEMS, STOPPED_READING, DatasetError, Problem, capped
from dagperf.dataset.specs import ContextMode

BATCH_BYTES = 1 << 20
_BOM = b"\xef\xbb\xbf"
_NEWLINE = ord("\n")
_session_id = operator.attrgetter("session_id")
_turns = operator.attrgetter("turns")
_first = operator.itemgetter(0)
_model = operator.attrgetter("model")
_forks = operator.attrgetter("forks")
_spawns = operator.attrgetter("spawns")
_extra = operator.attrgetter("extra")
_pre_session = operator.attrgetter("pre_session_spawns")
_conversation_level = operator.attrgetter("conversation_level")
_STR = {str}
_STOPPED_CHECKING = (
    f"too many problems: stopped checking after {MAX_PROBLEMS}; fix these and validate again"
)


class Chunk(NamedTuple):
    data: bytes  # whole lines, without the newline that ends the last
    position: int  # where `data` starts in the stream
    first: int  # the number of its first line


class Chunks:
    """A stream's lines from `start` to `end` in chunks of about `BATCH_BYTES`, a line never
    cut; `next_line` is the number of the line after those read so far. A byte-order mark at
    the start of a file, as some tools write, is left out."""

    def __init__(self, stream: BinaryIO, start: int = 0, end: int | None = None):
        self._stream = stream
        self._start = start
        self._end = end
        self.next_line = 1

    def __iter__(self) -> Iterator[Chunk]:
        stream, left = self._stream, self._end
        position = self._start
        rest = b""
        if position == 0:
            rest = stream.read(len(_BOM))
            if rest == _BOM:
                rest, position = b"", len(_BOM)
            left = None if left is None else left - len(_BOM)
        while block := stream.read(BATCH_BYTES if left is None else min(BATCH_BYTES, left)):
            left = None if left is None else left - len(block)
            whole, newline, rest = (rest + block).rpartition(b"\n")
            if newline:  # else `rest` holds all read so far, no line ended yet
                yield Chunk(whole, position, self.next_line)
                self.next_line += _count_lines(whole)
                position += len(whole) + 1
        if rest:
            yield Chunk(rest, position, self.next_line)
            self.next_line += rest.count(b"\n") + 1


def _count_lines(whole: bytes) -> int:
    """The lines in bytes that end without a newline: numpy's vectorised compare counts a
    megabyte's newlines four times as fast as `bytes.count`."""
    return int(np.count_nonzero(np.frombuffer(whole, np.uint8) == _NEWLINE)) + 1


class FilePass:
    """What one pass over a file (or a part of it) has found so far."""

    def __init__(self, source: str, store: LineStore):
        self.source = source
        self.store = store
        self.problems: list[Problem] = []
        self.ids: dict[str, int] = {}
        self.line_numbers = array("q")
        self.turns = array("q")
        self.edges = EdgeList()
        self.noted = Noted()  # what the whole-file rules need of some sessions
        self.models: set[str | None] = set()

    def report(self, line: int | None, message: str) -> None:
        self.problems.append(Problem(self.source, line, message))
        if len(self.problems) >= MAX_PROBLEMS:
            raise DatasetError(capped(self.problems, Problem(self.source, line, STOPPED_READING)))

    def take_block(self, chunk: Chunk) -> bool:
        """The chunk taken whole, or False (nothing taken) when it needs a look line by line."""
        data = chunk.data
        if data[-1:] in (b"", b"\n"):
            return False
        block = BlockBytes(data)
        if block.escapes_unicode() or block.suspect_digits() or block.nests_deep():
            return False
        ends = block.ends
        starts = np.concatenate(([0], ends + 1))
        try:
            records = check_lines(data)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return False
        if len(records) != len(starts):
            return False  # blank lines: their numbers would shift
        sorted_ = _Sorted(records, data)
        if not sorted_.turned:
            return False  # an orchestrator (it has no turns): line by line
        if any(sets_messages(records[i]) for i in sorted_.examined):
            return False  # the models word that rule
        if not self._file_all(list(map(_session_id, records))):
            return False
        self.store.add_block(data, chunk.position, (starts, np.append(ends, len(data))))
        base, first, count = len(self.line_numbers), chunk.first, len(records)
        self.line_numbers.frombytes(np.arange(first, first + count, dtype=np.int64).tobytes())
        self.turns.frombytes(sorted_.turn_counts.tobytes())
        self.models |= sorted_.models
        # Decoded whole: a line names its conversation's own fields (if only as null), so the
        # file is read back whole.
        self.noted.own_fields |= isinstance(records[0], ConversationRecord)
        self.edges.add_forks([base + i for i in sorted_.forks], sorted_.fork_children)
        for i in sorted_.examined:
            record = records[i]
            self.models.update(turn.model for turn in record.turns)
            self.examine(first + i, record, base + i, sorted_.system)
        return True

    def _file_all(self, sids: list[str]) -> bool:
        """A block's sessions filed as the next conversations, unless one came before or
        comes twice (nothing filed then: its lines say which, one by one)."""
        ids, count = self.ids, len(self.ids)
        if not ids.keys().isdisjoint(sids):
            return False
        base = len(self.line_numbers)
        ids.update(zip(sids, range(base, base + len(sids)), strict=True))
        if len(ids) != count + len(sids):  # a session twice in the block: every one was new
            for sid in sids:
                ids.pop(sid, None)
            return False
        return True

    def take_lines(self, chunk: Chunk) -> None:
        numbers = suspect_digits(chunk.data)
        starts: list[int] = []
        ends: list[int] = []
        kept: dict[int, bytes] = {}
        offset = 0
        for lineno, piece in enumerate(chunk.data.split(b"\n"), chunk.first):
            start, offset = offset, offset + len(piece) + 1
            raw = piece.strip()
            if not raw:
                continue
            record = None if line_problem(raw, numbers) else check_line(raw)
            if record is None:
                read = read_slowly(raw)
                if isinstance(read, list):
                    self._refused(lineno, raw, read)
                    continue
                record, kept[len(starts)] = read
            self.line_numbers.append(lineno)
            self.turns.append(len(record.turns))
            self.models.update(turn.model for turn in record.turns)
            number = len(self.store) + len(starts)
            if self.file(lineno, record, number):
                self.examine(lineno, record, number, system=True)
            starts.append(start)
            ends.append(start + len(piece))
        spans = (np.array(starts, np.int64), np.array(ends, np.int64))
        self.store.add_block(chunk.data, chunk.position, spans, kept)

    def _refused(self, lineno: int, raw: bytes, problems: list[str]) -> None:
        sid = session_id_of(raw)
        if sid is not None:
            self.noted.unparsed.add(sid)
        for message in problems:
            self.report(lineno, message + (f" (session '{sid}')" if sid else ""))

    def file(self, lineno: int, record: PlainChecked, number: int) -> bool:
        """One decoded line filed as conversation `number`, unless its session came before."""
        sid = record.session_id
        if sid in self.ids:
            self._duplicate(lineno, sid)
            return False
        self.ids[sid] = number
        return True

    def _duplicate(self, lineno: int, sid: str) -> None:
        first = self.line_numbers[self.ids[sid]]
        self.report(lineno, f"duplicate session_id '{sid}' (first declared on line {first})")

    def examine(self, lineno: int, plain: PlainChecked, number: int, system: bool) -> None:
        """A filed line's branches and own rules; `system` False when the line cannot hold a
        system message."""
        record = whole(plain)
        # Read back as it decoded: a line that names a conversation's own field, even as
        # null, is no plain record.
        self.noted.own_fields |= isinstance(plain, ConversationRecord)
        sid = record.session_id
        positions = system_positions(record) if system else None
        if record.context_mode is ContextMode.MESSAGE_ARRAY_WITH_RESPONSES:
            self.noted.isolated.add(sid)
        elif positions and positions[0]:
            self.noted.opening_system[sid] = positions[0]
        if branches := conversation_branches(record):
            self.edges.add(number, branches)
        for message in conversation_problems(record, positions):
            self.report(lineno, message)

    def check(self) -> tuple[Edges, list[str]]:
        """The whole-file rules: the edges with their children numbered and each
        conversation's session id by number, or a DatasetError with every problem found."""
        if not self.line_numbers and not self.problems:
            self.report(None, "empty file: a dag_jsonl file needs at least one conversation line")
        sids = self._sids()
        edges = self.edges.resolve(self.ids)
        # Whole-file rules still run when lines failed, so one pass shows everything;
        # references to a failed line's session are not reported as undeclared, since the
        # line has its own error.
        problems = self.problems
        for lineno, message in file_problems(edges, self.ids, sids, self.line_numbers, self.noted):
            problems.append(Problem(self.source, lineno, message))
            if len(problems) > MAX_PROBLEMS:
                break
        if problems:
            problems.sort(key=lambda p: p.line or 0)
            if len(problems) > MAX_PROBLEMS:
                raise DatasetError(capped(problems, Problem(self.source, None, _STOPPED_CHECKING)))
            raise DatasetError(problems)
        self.store.seal()
        return edges, sids

    def _sids(self) -> list[str]:
        """Each conversation's session id by its number ("" for a number filed twice: a
        duplicate line, whose session came before)."""
        if len(self.ids) == len(self.line_numbers):
            return list(self.ids)
        sids = [""] * len(self.line_numbers)
        for sid, number in self.ids.items():
            sids[number] = sid
        return sids

    def packed_sids(self) -> bytes:
        """Each conversation's session id by its number, as they travel between processes."""
        return msgspec.msgpack.encode(self._sids())

    def part(self, with_sids: bool = True) -> Part:
        """What this pass found, to be merged into the pass over the part of the file before
        (its line numbers counted from 1, its conversations from 0); without its session ids
        when they were sent ahead (`packed_sids`)."""
        self.edges.number(self.ids)
        return Part(
            self.problems,
            self.packed_sids() if with_sids else b"",
            self.line_numbers,
            self.turns,
            self.store.spans(),
            self.edges,
            self.noted,
            self.models,
        )

    def file_ahead(self, packed: bytes) -> tuple[list[str], bool]:
        """The session ids of the part that follows (`packed_sids`), filed now if they are
        apart from this pass's: its edges must be numbered first (their children are looked up
        among this part's sessions only). Returns them, and whether they were filed."""
        self.edges.number(self.ids)
        sids = msgspec.msgpack.decode(packed, type=list[str])
        return sids, self._file_apart(sids, len(self.line_numbers))

    def unfile(self, sids: list[str]) -> None:
        """Take back ids `file_ahead` filed (the part they belong to never came)."""
        for sid in sids:
            del self.ids[sid]

    def merge(
        self, part: Part, lines_before: int, ahead: tuple[list[str], bool] | None = None
    ) -> None:
        """A later part of the file read by another pass, which started `lines_before` lines
        into the file; `ahead`: what `file_ahead` did with its session ids, if it had them."""
        offset = len(self.line_numbers)
        for p in part.problems:
            self.report(p.line and p.line + lines_before, p.message)
        numbers = np.frombuffer(part.line_numbers, np.int64) + lines_before
        self.line_numbers.frombytes(numbers.tobytes())
        self.turns.extend(part.turns)
        self.edges.number(self.ids)  # before the ids of the other part join them
        self.edges.extend(part.edges, offset)
        if ahead is None:
            sids = msgspec.msgpack.decode(part.sids, type=list[str])
            ahead = sids, self._file_apart(sids, offset)
        sids, filed = ahead
        if not filed:  # a session in both parts: number them as one
            self.edges.name_numbered(sids, offset)
            self.edges.numbers = array("q")
            for number, sid in enumerate(sids, offset):
                if sid and sid in self.ids:
                    self._duplicate(self.line_numbers[number], sid)
                elif sid:
                    self.ids[sid] = number
        self.store.extend(part.spans)
        self.noted.update(part.noted)
        self.models |= part.models

    def _file_apart(self, sids: list[str], offset: int) -> bool:
        """The sessions of another part filed from `offset`, unless one is in both parts or is
        a duplicate there (nothing filed then)."""
        if "" in sids:
            return False
        before = self.ids.copy()  # a dict copy costs a tenth of checking the keys apart
        self.ids.update(zip(sids, range(offset, offset + len(sids)), strict=True))
        if len(self.ids) == len(before) + len(sids):
            return True
        self.ids = before
        return False


class Part(NamedTuple):
    """A pass's findings over a part of a file, as they travel between processes."""

    problems: list[Problem]
    sids: bytes  # by conversation number, as a msgpack list ("" for a duplicate's number)
    line_numbers: array[int]
    turns: array[int]
    spans: Spans
    edges: EdgeList
    noted: Noted
    models: set[str | None]


class _Sorted:
    """A block's records by what they need: most only filing; a line of one turn that forks to
    distinct bare session ids (the common branching line) breaks no rule of its own and is
    filed with its edges in bulk; the rest are examined one by one (all of them when the block
    may hold a system message). Each field is read for every record by a C-level `map`, not a
    Python loop, and a field no record sets is not read twice: this runs once per line of the
    file."""

    def __init__(self, records: Sequence[PlainChecked], data: bytes):
        count = len(records)
        turns = list(map(_turns, records))
        self.turned = all(turns)  # else an orchestrator is among them: nothing more is read
        if not self.turned:
            return
        if sum(map(len, turns)) == count:  # one turn each (a record has at least one)
            self.turn_counts = np.ones(count, np.int64)
        else:
            self.turn_counts = np.fromiter(map(len, turns), np.int64, count)
        first = list(map(_first, turns))
        self.models = set(map(_model, first))
        self.system = b'"system"' in data

        def flags(field: Callable[[Any], object], items: Sequence[Any]) -> NDArray[np.bool_]:
            if not any(map(field, items)):  # the common case: no record sets it
                return np.zeros(count, bool)
            return np.fromiter(map(bool, map(field, items)), bool, count)

        examined = (self.turn_counts > 1) | flags(_pre_session, records)
        examined |= flags(_spawns, first) | flags(_extra, first)
        if isinstance(records[0], ConversationRecord):  # decoded whole: a line sets its own
            examined |= flags(_conversation_level, records)
        if self.system:
            examined[:] = True
        forks: list[Any] = list(map(_forks, first))
        candidates = np.flatnonzero(~examined & flags(bool, forks)).tolist()
        entries = [forks[i] for i in candidates]
        if _distinct_names(list(chain.from_iterable(entries))):  # so each line's are
            self.forks, odd = candidates, []
        else:
            bare = list(map(_distinct_names, entries))
            self.forks = [i for i, ok in zip(candidates, bare, strict=True) if ok]
            odd = [i for i, ok in zip(candidates, bare, strict=True) if not ok]
        self.fork_children: list[list[str]] = [forks[i] for i in self.forks]  # all str
        self.examined = sorted(np.flatnonzero(examined).tolist() + odd)


def _distinct_names(entries: list[str] | list[ForkRecord]) -> bool:
    """Whether branch entries are all bare session ids, none twice (True for none)."""
    names = set(entries)
    return len(names) == len(entries) and set(map(type, names)) <= _STR
