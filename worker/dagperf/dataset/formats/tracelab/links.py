"""Who spawned whom, found as AIPerf 0.13 finds it: by time, since a TraceLab row names no parent.

A Claude session spawns a sub-agent with a blocking `Agent` or `Task` call, so the call's span
is the sub-agent's: a window. Calls under 10 s are left out (mostly no-ops and errors, and wide
enough to catch unrelated sessions). A Codex session spawns and waits asynchronously, and the
corpus strips the handles that would pair a spawn with its wait, so its one window runs from its
first `spawn_agent` to its last `wait_agent` result. A session lies in a window when every time
it holds (its events' and its tools') lies inside, the window belongs to another session of the
same `user` and `project` (those of their first rows), and no narrower window holds it (on a tie,
the earlier start, then the lesser parent id).

Only one level is nested: a Weka sub-agent cannot hold sub-agents of its own, so a session whose
parent is itself a sub-agent stays a session of its own, as AIPerf keeps it.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

from dagperf.dataset.formats.tracelab.rows import Session

MIN_SPAWN_MS = 10_000  # AIPerf's AIPERF_DATASET_TRACELAB_MIN_SPAWN_MS default
SPAWNING = frozenset({"Agent", "Task"})


class Window(NamedTuple):
    """A parent's spawning call (or a Codex session's spawns): the sessions inside it are its
    sub-agents."""

    start: float  # POSIX seconds
    end: float
    parent: str
    duration_ms: int  # the call's recorded latency (Codex: the window's length)


Children = dict[str, list[tuple[str, Window]]]  # a parent's sub-agents, in the file's order


def sub_agents(sessions: dict[str, Session]) -> Children:
    """Each parent's sub-agents with the window that holds them, one level deep."""
    windows: dict[tuple[str | None, str | None], list[Window]] = {}
    for session in sessions.values():
        windows.setdefault(_identity(session), []).extend(_windows(session))
    links: dict[str, Window] = {}
    for sid, session in sessions.items():
        if (span := _span(session)) is None:
            continue
        start, end = span
        holding = [
            w
            for w in windows.get(_identity(session), ())
            if w.parent != sid and w.start <= start and end <= w.end
        ]
        if holding:  # the narrowest; min keeps the first of equals, as a stable sort would
            links[sid] = min(holding, key=lambda w: (w.end - w.start, w.start, w.parent))
    children: Children = {}
    for child, window in links.items():
        if window.parent not in links:
            children.setdefault(window.parent, []).append((child, window))
    return children


def _identity(session: Session) -> tuple[str | None, str | None]:
    first = session.rows[0][1]
    return first.user, first.project


def _span(session: Session) -> tuple[float, float] | None:
    """The first and last of every time the session holds, its events' and its tools'."""
    times = [
        moment
        for _, row in session.rows
        for moment in itertools.chain(
            (event.timestamp for event in row.timing_events or ()),
            (t for tool in row.tools or () for t in (tool.emitted_at, tool.result_at)),
        )
        if moment is not None
    ]
    return (min(times), max(times)) if times else None


def _windows(session: Session) -> list[Window]:
    tools = [tool for _, row in session.rows for tool in row.tools or ()]
    if session.rows[0][1].provider == "codex":
        spawns = [t.emitted_at for t in tools if t.tool_name == "spawn_agent"]
        waits = [t.result_at for t in tools if t.tool_name == "wait_agent"]
        starts = [t for t in spawns if t is not None]
        ends = [t for t in waits if t is not None]
        if not starts or not ends or max(ends) <= min(starts):
            return []
        start, end = min(starts), max(ends)
        return [Window(start, end, session.sid, int((end - start) * 1000))]
    return [
        Window(tool.emitted_at, tool.result_at, session.sid, int(tool.tool_wall_latency_ms))
        for tool in tools
        if tool.tool_name in SPAWNING
        and tool.tool_wall_latency_ms is not None
        and tool.tool_wall_latency_ms >= MIN_SPAWN_MS
        and tool.emitted_at is not None
        and tool.result_at is not None
    ]
