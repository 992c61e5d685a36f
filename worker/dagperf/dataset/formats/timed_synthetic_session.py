"""The timed_synthetic_session file format (Veeksha-style): one request per line, by length.

    {"session_id": "s1", "arrived_at": 0.0, "num_prefill_tokens": 400, "num_decode_tokens": 50}
    {"session_id": "s1", "num_prefill_tokens": 80, "num_decode_tokens": 30}
    {"session_id": "d", "arrived_at": 2.5, "num_prefill_tokens": 300, "num_decode_tokens": 20,
     "session_context": {"node_id": 0}}
    {"session_id": "d", "num_prefill_tokens": 50, "num_decode_tokens": 20,
     "session_context": {"node_id": 1, "parent_nodes": [0], "history_parent": 0}}

Rows sharing a `session_id` are one session's requests, which may be interleaved with other
sessions' rows. Without `session_context` they are a chain in file order: each row waits for the
previous one and continues its context and reply, as a chat does. With it, every row of the
session says its place in a DAG: a node waits for all its `parent_nodes`, then
`wait_after_ready` seconds, and continues the context of its `history_parent`, if any; parents
may come on later lines, and nodes are sent parents first. A session is one or the other:
mixing the two is refused.

A row carries only lengths: `num_prefill_tokens` new prompt tokens (the history comes on top at
run time) and `num_decode_tokens`, the reply's max_tokens. The text is a corpus passage seeded
by the session and node ids (crc32, stable across processes), so a file always gives the same
prompts. Session and node ids may be strings or integers (Veeksha writes integers); 7 and "7"
name the same session.

A session arrives at `arrived_at` seconds, given on its first row and, if repeated, the same on
every row. The file is timed when every session has an arrival; one where only some do is
refused, as it could run neither on its schedule nor without it. A session's `context_mode`
(on any of its rows, consistently) overrides the global default, `deltas_without_responses`.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from dagperf.dataset.formats.columns import Id, session_id_of
from dagperf.dataset.limits import (
    ArrivalSeconds,
    OutputTokens,
    PromptTokens,
    WaitSeconds,
)
from dagperf.dataset.loader import Problems, load_file, validated_lines
from dagperf.dataset.prompts import passage
from dagperf.dataset.specs import (
    REFUSED_CONTEXT_MODE,
    ContextMode,
    GraphNode,
    Payload,
    SessionSpec,
    TraceDataset,
    parents_first,
)
from dagperf.runtime.gcpause import gc_paused


class SessionContext(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    node_id: Id = Field(description="Unique within the session.")
    parent_nodes: list[Id] = Field(
        default_factory=list, description="Nodes of the same session that must finish first."
    )
    history_parent: Id | None = Field(
        default=None, description="One of parent_nodes, whose context and reply this continues."
    )
    wait_after_ready: WaitSeconds = Field(
        default=0.0, description="Seconds to wait after the last parent finished."
    )


class TimedSessionRow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    session_id: Id = Field(description="Rows sharing it are one session's requests.")
    arrived_at: ArrivalSeconds | None = Field(
        default=None, description="The session's arrival in seconds, on its first row."
    )
    num_prefill_tokens: PromptTokens = Field(description="New prompt tokens of this request.")
    num_decode_tokens: OutputTokens = Field(description="Maximum completion tokens (max_tokens).")
    session_context: SessionContext | None = Field(
        default=None, description="This request's place in the session's DAG."
    )
    context_mode: ContextMode | None = Field(default=None, description="For the whole session.")


def row_problems(row: TimedSessionRow) -> Iterable[str]:
    """What is wrong with a row on its own, each as `field: message`."""
    if row.context_mode is ContextMode.MESSAGE_ARRAY_WITHOUT_RESPONSES:
        yield f"context_mode: {REFUSED_CONTEXT_MODE}"
    ctx = row.session_context
    if ctx is None:
        return
    seen: set[str] = set()
    for k, parent in enumerate(ctx.parent_nodes):
        where = f"session_context.parent_nodes.{k}"
        if parent == ctx.node_id:
            yield f"{where}: node '{parent}' cannot depend on itself"
        elif parent in seen:
            yield f"{where}: node '{parent}' given twice"
        seen.add(parent)
    if ctx.history_parent is not None and ctx.history_parent not in ctx.parent_nodes:
        yield (f"session_context.history_parent: '{ctx.history_parent}' is not one of parent_nodes")


@dataclass
class _Session:
    rows: list[tuple[int, TimedSessionRow]] = field(default_factory=list)
    mode: tuple[int, ContextMode] | None = None  # the line that set it, and the mode
    line_of: dict[str, int] = field(default_factory=dict)  # node id -> line, with contexts
    broken: bool = False  # a row failed: whole-session checks would only echo it

    @property
    def first_line(self) -> int:
        return self.rows[0][0]

    @property
    def arrived_at(self) -> float | None:
        return self.rows[0][1].arrived_at


def load_timed_sessions(path: str | Path) -> TraceDataset:
    return load_file(path, read_timed_sessions)


def read_timed_sessions(lines: Iterable[bytes], source: str) -> TraceDataset:
    """Validate a timed_synthetic_session trace given as byte lines; `source` names it."""
    with gc_paused():
        return _read(lines, source)


def _read(lines: Iterable[bytes], source: str) -> TraceDataset:
    problems = Problems(source)
    sessions: dict[str, _Session] = {}
    seen_a_line = False
    for lineno, raw, row in validated_lines(
        lines, TimedSessionRow, problems, "one request per line"
    ):
        seen_a_line = True
        if row is None:
            sid = session_id_of(raw)
            if sid is not None:
                sessions.setdefault(sid, _Session()).broken = True
            continue
        session = sessions.setdefault(row.session_id, _Session())
        errors = [*row_problems(row), *_session_row_problems(row, session, lineno)]
        for message in errors:
            problems.add(lineno, message)
        if errors:
            session.broken = True
        else:
            session.rows.append((lineno, row))
    if not seen_a_line:
        problems.add(
            None, "empty file: a timed_synthetic_session file needs at least one request line"
        )
    for sid, session in sessions.items():
        if session.rows and not session.broken:
            for lineno, message in _graph_problems(sid, session):
                problems.add(lineno, message)
    timed = _check_arrivals(sessions, problems)
    problems.raise_any()
    specs = [_spec(sid, session, timed) for sid, session in sessions.items()]
    if timed:
        specs.sort(key=lambda spec: spec.start_s or 0.0)  # stable: ties keep file order
    return TraceDataset(specs, None, timed)


def _session_row_problems(row: TimedSessionRow, session: _Session, lineno: int) -> Iterable[str]:
    """A row against the earlier rows of its session; records what later rows are checked by."""
    sid = row.session_id
    if session.rows:
        first_line, first = session.rows[0]
        if (row.session_context is None) != (first.session_context is None):
            yield (
                f"session_context: session '{sid}' mixes rows with and without session_context "
                f"(line {first_line} has {'one' if first.session_context else 'none'})"
            )
        if row.arrived_at is not None and first.arrived_at is None:
            yield (
                f"arrived_at: session '{sid}' arrives at its first row's arrived_at, and line "
                f"{first_line} has none"
            )
        elif row.arrived_at is not None and row.arrived_at != first.arrived_at:
            yield (
                f"arrived_at: {row.arrived_at} differs from session '{sid}''s "
                f"{first.arrived_at} (line {first_line}): a session arrives once"
            )
    if row.context_mode is not None:
        if session.mode is None:
            session.mode = (lineno, row.context_mode)
        elif session.mode[1] is not row.context_mode:
            yield (
                f"context_mode: '{row.context_mode}' conflicts with '{session.mode[1]}' given "
                f"for session '{sid}' on line {session.mode[0]}"
            )
    if row.session_context is not None:
        node = row.session_context.node_id
        if node in session.line_of:
            yield (
                f"session_context.node_id: node '{node}' is already in session '{sid}' "
                f"(line {session.line_of[node]})"
            )
        else:
            session.line_of[node] = lineno


def _graph_problems(sid: str, session: _Session) -> Iterable[tuple[int, str]]:
    """Parents that are not nodes of the session, and cycles."""
    if session.rows[0][1].session_context is None:
        return
    missing = False
    for lineno, row in session.rows:
        for k, parent in enumerate(_context(row).parent_nodes):
            if parent not in session.line_of:
                missing = True
                yield (
                    lineno,
                    f"session_context.parent_nodes.{k}: no node '{parent}' in session '{sid}'",
                )
    if missing:
        return
    order = _order(session)
    if len(order) < len(session.rows):
        cycle = _cycle(session, set(order))
        line = min(session.line_of[node] for node in cycle)
        start = next(i for i, node in enumerate(cycle) if session.line_of[node] == line)
        cycle = cycle[start:] + cycle[:start]  # from its earliest row
        path = " -> ".join(f"'{node}'" for node in [*cycle, cycle[0]])
        yield (
            line,
            f"session_context.parent_nodes: session '{sid}' has a cycle: {path} (parent to child)",
        )


def _order(session: _Session) -> list[int]:
    """Row positions parents first, otherwise in file order; short of all rows on a cycle."""
    position = {_context(row).node_id: i for i, (_, row) in enumerate(session.rows)}
    edges = [
        (position[parent], i)
        for i, (_, row) in enumerate(session.rows)
        for parent in _context(row).parent_nodes
    ]
    return parents_first(len(session.rows), edges)


def _cycle(session: _Session, done: set[int]) -> list[str]:
    """A cycle among the rows `_order` could not place: each has a parent among them."""
    contexts = {
        _context(row).node_id: _context(row)
        for i, (_, row) in enumerate(session.rows)
        if i not in done
    }
    node, path = next(iter(contexts)), []
    while node not in path:
        path.append(node)
        node = next(p for p in contexts[node].parent_nodes if p in contexts)
    cycle = path[path.index(node) :]
    cycle.reverse()  # parent before child, as the arrows read
    return cycle


def _check_arrivals(sessions: dict[str, _Session], problems: Problems) -> bool:
    """Whether every session has an arrival; reports a file where only some do."""
    known = [(sid, s) for sid, s in sessions.items() if s.rows and not s.broken]
    with_arrival = [(sid, s) for sid, s in known if s.arrived_at is not None]
    without = [(sid, s) for sid, s in known if s.arrived_at is None]
    if with_arrival and without:
        sid, session = without[0]
        other, timed = with_arrival[0]
        problems.add(
            session.first_line,
            f"arrived_at: session '{sid}' has none, but session '{other}' (line "
            f"{timed.first_line}) has one: give every session an arrival or none",
        )
    return bool(with_arrival) and not without


def _spec(sid: str, session: _Session, timed: bool) -> SessionSpec:
    rows = session.rows
    if rows[0][1].session_context is None:
        nodes = tuple(
            GraphNode(
                key=str(k),
                payload=_payload(sid, str(k), row),
                parents=(k - 1,) if k else (),
                history=k - 1 if k else None,
            )
            for k, (_, row) in enumerate(rows)
        )
    else:
        order = _order(session)
        index = {_context(rows[i][1]).node_id: k for k, i in enumerate(order)}
        node_list = []
        for i in order:
            row = rows[i][1]
            ctx = _context(row)
            history = ctx.history_parent
            node_list.append(
                GraphNode(
                    key=ctx.node_id,
                    payload=_payload(sid, ctx.node_id, row),
                    parents=tuple(sorted(index[p] for p in ctx.parent_nodes)),
                    history=None if history is None else index[history],
                    wait_s=ctx.wait_after_ready,
                )
            )
        nodes = tuple(node_list)
    mode = session.mode[1] if session.mode else None
    return SessionSpec(sid, nodes, mode, session.arrived_at if timed else None)


def _context(row: TimedSessionRow) -> SessionContext:
    assert row.session_context is not None, "a session with contexts has one on every row"
    return row.session_context


def _payload(sid: str, node: str, row: TimedSessionRow) -> Payload:
    seed = zlib.crc32(f"{sid}\x1f{node}".encode())  # str hash() differs between processes
    text = passage(row.num_prefill_tokens, random.Random(seed))
    return Payload.of([{"role": "user", "content": text}], max_tokens=row.num_decode_tokens)


__all__ = [
    "SessionContext",
    "TimedSessionRow",
    "load_timed_sessions",
    "read_timed_sessions",
]
