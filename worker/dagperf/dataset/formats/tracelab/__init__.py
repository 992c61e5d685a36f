"""AIPerf's `tracelab`: the TraceLab corpus (uw-syfi) of real Claude Code and Codex sessions, one
JSONL row per LLM round, plain or gzip-compressed. Each session becomes the Weka coding-agent
trace AIPerf 0.13 converts it into, and is then replayed exactly as `weka_trace` replays one
(`agent_traces.read_traces`): one reconstruction for both formats, so they cannot drift apart.

    {"session_id": "claude:9f3c", "round_index": 4, "user": "u17", "project": "p2",
     "model": "claude-opus-4", "input_tokens_total": 41589, "prefix_tokens": 41129,
     "output_tokens": 1275, "first_input_event_type": "tool_result",
     "timing_events": [{"event_type": "tool_result", "timestamp": "2026-06-01T05:42:08.308Z"},
                       {"event_type": "text", "timestamp": "2026-06-01T05:42:23.420Z"}],
     "tools": [{"tool_name": "Task", "emitted_at": "...", "result_at": "...",
                "tool_wall_latency_ms": 21467}]}

The corpus records neither prompts nor who spawned whom, so both are reconstructed, as AIPerf
reconstructs them: rows are read and grouped into sessions of timed rounds (`rows`), sub-agents
are found by time (`links`), and each session is written as a trace with made-up block ids that
reproduce its recorded prefix reuse (`convert`).

Replay is untimed, under `--concurrency` or `--request-rate`, as for weka_trace: a session's
requests keep their recorded idle gaps, sessions do not keep their offsets from each other.
AIPerf puts a TraceLab file on a fixed schedule by itself (its rows hold times), where it sends
each sub-agent twice (spawned, and again as a root) and stops at the file's line count; dagperf
gives what AIPerf gives with `--no-fixed-schedule`. AIPerf's `AIPERF_DATASET_TRACELAB_*` settings
and its `--isl-block-size` choose other reconstructions; dagperf has their defaults (sub-agents
joined, Codex ones too, from calls of 10 s; blocks of 64 tokens) and no knob, until a user needs
one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Unpack

from dagperf.dataset.formats.agent_traces import Replay, read_traces
from dagperf.dataset.formats.agent_traces.schema import Trace
from dagperf.dataset.formats.tracelab import convert, links, rows
from dagperf.dataset.formats.tracelab.rows import Session
from dagperf.dataset.loader import Problems
from dagperf.dataset.specs import TraceDataset
from dagperf.runtime.gcpause import gc_paused

log = logging.getLogger("dagperf.dataset")
NAMED = 5  # lines a warning names of what was passed over
NO_ROUND = (
    "no session has a round with a time: a user_message, tool_result, text, reasoning or "
    "tool_call event with its timestamp"
)


def read_tracelab(lines: Iterable[bytes], source: str, **replay: Unpack[Replay]) -> TraceDataset:
    """Validate and convert a TraceLab file given as byte lines; `source` names it in problems."""
    return read_traces(traces_of(lines, source), replay)


def traces_of(lines: Iterable[bytes], source: str) -> list[tuple[str, int | None, Trace]]:
    """The file's sessions as Weka traces, each with the source and line that name it: roots in
    the order of their first rows, then the sub-agents that could not be placed in their
    parents, as AIPerf orders them."""
    with gc_paused():
        problems, passed = Problems(source), rows.Passed()
        sessions = rows.sessions_of(lines, problems, passed)
        if not sessions and not problems.items:
            problems.add(None, "no TraceLab sessions: every row needs a session_id")
        problems.raise_any()
        children = links.sub_agents(sessions)
        nested = {sid for kids in children.values() for sid, _ in kids}
        placed: set[str] = set()
        built = [
            (session, convert.trace(session, children.get(sid, []), sessions, placed))
            for sid, session in sessions.items()
            if sid not in nested
        ]
        alone = [sid for sid in sessions if sid in nested and sid not in placed]  # in file order
        built += [
            (sessions[sid], convert.trace(sessions[sid], [], sessions, placed)) for sid in alone
        ]
        traces = _named(source, built, problems)
        if not traces and not problems.items:
            problems.add(None, NO_ROUND)
        problems.raise_any()
    if passed or alone:
        _warn(source, passed, [sid for sid in alone if sessions[sid].rounds])
    return traces


def _named(
    source: str, built: list[tuple[Session, Trace | None]], problems: Problems
) -> list[tuple[str, int | None, Trace]]:
    """The traces with the line that names each, a session without a timed round left out; two
    sessions whose ids make one trace id are refused, as AIPerf refuses them."""
    owner: dict[str, Session] = {}
    out: list[tuple[str, int | None, Trace]] = []
    for session, trace in built:
        if trace is None:
            continue
        if first := owner.get(trace.id):
            problems.add(
                session.line,
                f"session_id: {session.sid!r} makes the trace id {trace.id!r}, as {first.sid!r} "
                f"on line {first.line} does: AIPerf refuses two sessions of one trace id",
            )
            continue
        owner[trace.id] = session
        out.append((source, session.line, trace))
    return out


def _warn(source: str, passed: rows.Passed, alone: list[str]) -> None:
    """What AIPerf passes over or cannot nest, said once (AIPerf says only the second)."""
    if passed:
        shown = "; ".join(f"line {line}: {why}" for line, why in sorted(passed)[:NAMED])
        more = f"; and {len(passed) - NAMED} more" if len(passed) > NAMED else ""
        log.warning("%s: passed over, as AIPerf passes them over: %s%s", source, shown, more)
    if alone:
        names = ", ".join(alone[:NAMED]) + (
            f" and {len(alone) - NAMED} more" * (len(alone) > NAMED)
        )
        log.warning(
            "%s: replayed as sessions of their own, as AIPerf replays them: the sub-agent "
            "sessions %s, spawned before any request of their parents",
            source,
            names,
        )


__all__ = ["read_tracelab", "traces_of"]
