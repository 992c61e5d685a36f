"""Coding-agent traces in Weka's shape (`schema`) and their replay as AIPerf 0.13 replays them:
what the weka_trace and tracelab formats share, so that they cannot drift apart. Not a format:
weka_trace reads its JSON documents into `Trace`s, tracelab converts its rows into them, and
both hand them here.

Each trace becomes a tree of a main agent and its sub-agents (`plan`), each request's prompt
rebuilt from its block ids (`buffer`, `spec`). Trees are built when a run reaches them; a trace
kept as its file is decoded again then, so a directory of a thousand sessions holds of each only
what a run must know up front (`Known`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import msgspec

from dagperf.dataset.coding_corpus import Blocks
from dagperf.dataset.formats.agent_traces.plan import Plan, PlanError, plan
from dagperf.dataset.formats.agent_traces.schema import Trace
from dagperf.dataset.formats.agent_traces.spec import AS_WRITTEN, session
from dagperf.dataset.lazy import BuiltOnRead
from dagperf.dataset.loader import DatasetError, Problem
from dagperf.dataset.specs import Known, SessionSpec, TraceDataset

decode = msgspec.json.Decoder(Trace).decode  # one session's JSON document, in one C pass


class Replay(TypedDict, total=False):
    """What a run asks of the replay, given to the agent traces' readers by name (the run's
    ReadOptions of these names): the tokens it counts prompts in (else words), the seed of the
    text, and whether requests wait their recorded think time instead of the idle gap."""

    tokenizer_json: str | None
    seed: int | None
    think_time_only: bool


def read_traces(traces: list[tuple[str, int | None, Trace]], replay: Replay) -> TraceDataset:
    """Sessions already decoded (a tracelab file's, converted), each with the source and line
    that name it in a problem; held in memory, as their file was read whole."""
    found, counted = [], []
    for source, line, trace in traces:
        try:
            counted.append(Count.of(plan(trace)))
        except PlanError as e:
            found.append(Problem(source, line, f"{'.'.join(map(str, e.path))}: {e}"))
    if found:
        raise DatasetError(found)
    kept = [Kept(source, None, trace) for source, _, trace in traces]
    return dataset(kept, counted, replay)


@dataclass(frozen=True)
class Kept:
    """A session as the dataset keeps it: its file to decode again, or its trace (one file's)."""

    source: str
    path: Path | None
    trace: Trace | None


@dataclass(frozen=True)
class Count:
    """What a run must know of a session before it starts: its requests and its children."""

    requests: int
    children: int

    @classmethod
    def of(cls, planned: Plan) -> Count:
        conversations = planned.conversations
        return cls(sum(len(c.calls) for c in conversations), len(conversations) - 1)


def dataset(kept: list[Kept], counted: list[Count], replay: Replay) -> TraceDataset:
    """The sessions checked and counted, to be built when a run reaches each."""
    children = sum(c.children for c in counted)
    known = Known([c.requests for c in counted], children, min(children, 1), children + len(kept))
    sessions = _Sessions(kept, replay)
    return TraceDataset(sessions, AS_WRITTEN, timed=False, known=known, inputs_json=False)


class _Sessions(BuiltOnRead[SessionSpec]):
    """Each session built when it is taken, from its file read again."""

    def __init__(self, kept: list[Kept], replay: Replay):
        self._kept = kept
        self._replay = replay
        self._blocks: Blocks | None = None

    def __len__(self) -> int:
        return len(self._kept)

    def _build(self, index: int) -> SessionSpec:
        kept = self._kept[index]
        if kept.trace is None:
            trace, planned = _read_again(kept)
        else:
            trace, planned = kept.trace, plan(kept.trace)
        if self._blocks is None:  # the corpus is cut into the run's tokens once, when needed
            self._blocks = Blocks(self._replay.get("tokenizer_json"), self._replay.get("seed"))
        think_time_only = self._replay.get("think_time_only", False)
        return session(planned, self._blocks, trace.block_size, think_time_only)


def _read_again(kept: Kept) -> tuple[Trace, Plan]:
    """A kept file's trace and plan; it was checked when loaded, so a failure is a change."""
    assert kept.path is not None
    try:
        trace = decode(kept.path.read_bytes())
        return trace, plan(trace)
    except (msgspec.ValidationError, msgspec.DecodeError, PlanError, OSError):
        message = "changed since it was loaded: it no longer reads as it did"
        raise DatasetError([Problem(kept.source, None, message)]) from None


__all__ = ["Count", "Kept", "Replay", "dataset", "decode", "read_traces"]
