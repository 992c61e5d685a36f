"""The weka_trace format: Weka's KV-cache-tester recordings of coding-agent sessions, one JSON
document per session, or a directory of them (its `*.json` files, in name order), replayed as
AIPerf 0.13 replays them: each session a tree of a main agent and its sub-agents (`plan`), each
request's prompt rebuilt from its block ids (`buffer`, `spec`).

A file is checked when it is loaded: its schema (`schema`), then whether it can be replayed (a
PlanError names the part of it that cannot), every problem named by its line. Trees are built
when a run reaches them, from the file read again, so a directory of a thousand sessions holds
of each only what a run must know up front (`Known`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import msgspec

from dagperf.dataset.coding_corpus import Blocks
from dagperf.dataset.formats.weka_trace.directory import read_each
from dagperf.dataset.formats.weka_trace.plan import Plan, PlanError, plan
from dagperf.dataset.formats.weka_trace.schema import Trace
from dagperf.dataset.formats.weka_trace.spec import AS_WRITTEN, session
from dagperf.dataset.formats.weka_trace.wording import problems_of
from dagperf.dataset.lazy import BuiltOnRead
from dagperf.dataset.loader import DatasetError, Problem
from dagperf.dataset.specs import Known, SessionSpec, TraceDataset

_decode = msgspec.json.Decoder(Trace).decode


@dataclass(frozen=True)
class Replay:
    """What a run asks of the replay: the tokens it counts prompts in, the seed of the text,
    and whether requests wait their recorded think time instead of the idle gap."""

    tokenizer_json: str | None = None
    seed: int | None = None
    think_time_only: bool = False


def read_weka_trace(lines: Iterable[bytes], source: str, replay: Replay) -> TraceDataset:
    """One session's document, given as byte lines; `source` names it in problems."""
    data = b"".join(lines)
    trace, planned = _checked(data, source)
    return _dataset([_Kept(source, None, trace)], [_Count.of(planned)], replay)


def read_weka_directory(directory: Path, replay: Replay) -> TraceDataset:
    """Every `*.json` file of a directory (not below it), one session each, in name order."""
    files = sorted(p for p in directory.glob("*.json") if p.is_file())
    if not files:
        raise DatasetError([Problem(str(directory), None, "no *.json trace files in it")])
    kept: list[_Kept] = []
    counted: list[_Count] = []
    found: list[Problem] = []
    owner: dict[str, Path] = {}
    for path, read in zip(files, read_each(files, _read_one), strict=True):
        if isinstance(read, list):
            found += read
        elif read.trace_id in owner:
            message = f"id: '{read.trace_id}' is also the session of {owner[read.trace_id]}"
            found.append(Problem(str(path), _id_line(path), message + ": one file each"))
        else:
            owner[read.trace_id] = path
            kept.append(_Kept(str(path), path, None))
            counted.append(read.counted)  # the plan goes: the file is read again when run
    if found:
        raise DatasetError(found)
    return _dataset(kept, counted, replay)


class _Read(NamedTuple):
    trace_id: str
    counted: _Count


def _read_one(path: Path) -> _Read | list[Problem]:
    """What the directory keeps of one file (its plan is let go), or its problems."""
    try:
        data = path.read_bytes()
        trace, planned = _checked(data, str(path))
    except DatasetError as e:
        return e.problems
    except OSError as e:
        return [Problem(str(path), None, f"cannot read: {e.strerror or e}")]
    return _Read(trace.id, _Count.of(planned))


def read_traces(traces: list[tuple[str, int | None, Trace]], replay: Replay) -> TraceDataset:
    """Sessions already decoded (a tracelab file's, converted), each with the source and line
    that name it in a problem; held in memory, as their file was read whole."""
    found, counted = [], []
    for source, line, trace in traces:
        try:
            counted.append(_Count.of(plan(trace)))
        except PlanError as e:
            found.append(Problem(source, line, f"{'.'.join(map(str, e.path))}: {e}"))
    if found:
        raise DatasetError(found)
    kept = [_Kept(source, None, trace) for source, _, trace in traces]
    return _dataset(kept, counted, replay)


def _checked(data: bytes, source: str) -> tuple[Trace, Plan]:
    try:
        trace = _decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise DatasetError(problems_of(data, source, str(e))) from None
    try:
        return trace, plan(trace)
    except PlanError as e:
        raise DatasetError(problems_of(data, source, str(e), e.path)) from None


def _id_line(path: Path) -> int:
    from dagperf.dataset.json_places import line_of

    return line_of(path.read_bytes().decode("utf-8-sig", "replace"), ("id",))


@dataclass(frozen=True)
class _Kept:
    """A session as the dataset keeps it: its file to read again, or its trace (one file's)."""

    source: str
    path: Path | None
    trace: Trace | None


@dataclass(frozen=True)
class _Count:
    """What a run must know of a session before it starts: its requests and its children."""

    requests: int
    children: int

    @classmethod
    def of(cls, planned: Plan) -> _Count:
        conversations = planned.conversations
        return cls(sum(len(c.calls) for c in conversations), len(conversations) - 1)


def _dataset(kept: list[_Kept], counted: list[_Count], replay: Replay) -> TraceDataset:
    children = sum(c.children for c in counted)
    known = Known([c.requests for c in counted], children, min(children, 1), children + len(kept))
    sessions = _Sessions(kept, replay)
    return TraceDataset(sessions, AS_WRITTEN, timed=False, known=known, inputs_json=False)


class _Sessions(BuiltOnRead[SessionSpec]):
    """Each session built when it is taken, from its file read again."""

    def __init__(self, kept: list[_Kept], replay: Replay):
        self._kept = kept
        self._replay = replay
        self._blocks: Blocks | None = None

    def __len__(self) -> int:
        return len(self._kept)

    def _build(self, index: int) -> SessionSpec:
        kept = self._kept[index]
        trace = kept.trace
        if trace is None:
            assert kept.path is not None
            try:
                trace, _ = _checked(kept.path.read_bytes(), kept.source)
            except (DatasetError, OSError):
                message = "changed since it was loaded: it no longer reads as it did"
                raise DatasetError([Problem(kept.source, None, message)]) from None
        if self._blocks is None:  # the corpus is cut into the run's tokens once, when needed
            self._blocks = Blocks(self._replay.tokenizer_json, self._replay.seed)
        replay = self._replay
        return session(plan(trace), self._blocks, trace.block_size, replay.think_time_only)


__all__ = ["Replay", "read_traces", "read_weka_directory", "read_weka_trace"]
