"""`profile_export.jsonl`: one line per request, written as results arrive.

Lines go through a large write buffer straight to disk, so memory holds only what is in flight;
the file is flushed when the run ends (and by `flush`, which the scheduler calls now and then so
a crash loses little).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import msgspec

from dagperf.engine import Flight
from dagperf.graph import SessionKind
from dagperf.transport.protocol import Cut, Result
from dagperf.vocabulary.catalog import TIME_TO_FIRST_TOKEN, UNITS


def record(
    flight: Flight,
    result: Result,
    issued_ns: int,
    params: dict[str, Any],
    max_tokens: Any,
) -> dict[str, Any]:
    """One line; `params` are the body fields the request was sent with, `max_tokens` the cap
    on the reply's length among them, whatever its API calls it (`Api.max_tokens`)."""
    run = flight.run
    tree = run.tree
    node = tree.nodes[flight.node]
    delay_s = node.delay_s + (tree.gate_wait_s(flight.node, run.drawn) if tree.gates else 0.0)
    session = tree.sessions[node.session]
    parent = None if session.parent is None else run.correlation[session.parent]
    error = result.error
    metadata = {
        "session_num": flight.request_num,
        "x_request_id": flight.request_id,
        "x_correlation_id": run.correlation[node.session],
        "conversation_id": session.conversation_id,
        "turn_index": node.turn,
        "turn_count": session.turn_count,
        "credit_issued_ns": issued_ns,
        "request_start_ns": result.start_ns,
        "request_ack_ns": result.ack_ns,
        "request_end_ns": result.end_ns,
        "worker_id": flight.worker,
        "record_processor_id": "scheduler",
        "benchmark_phase": flight.phase.label,
        "was_cancelled": result.cancelled_ns is not None,
        "cancellation_time_ns": result.cancelled_ns,
        # Cut short by the run itself (not the endpoint's failure): what was seen of it.
        "cut": None if result.cut is None else cut_record(result.cut),
        "agent_depth": session.depth,
        "parent_correlation_id": parent,
        "root_correlation_id": run.correlation[0],
        "branch_id": session.branch_id,
        "branch_mode": session.kind.value if session.kind is not SessionKind.ROOT else None,
        # The requests this one waited for: the export is a DAG that can be checked on its own.
        "depends_on": [run.request_ids[d] for d in tree.waited(flight.node) if run.request_ids[d]],
        # Its own delay, and the think times of the gates between (an orchestrator's rounds).
        "delay_ms": 0.0 if flight.node in run.waived else delay_s * 1000,
        # How many records will name this one: the health check forgets it after the last.
        "dependents": tree.named_by(flight.node),
        # What the health check compares the output length with, whatever the API calls it.
        "max_tokens": max_tokens,
        "ignore_eos": bool(params.get("ignore_eos")),
        # Why the reply ended, in chat's words ("length": at max_tokens; "stop": by itself).
        "finish_reason": result.finish_reason,
        "token_count_source": result.token_source,
        # Which backend served it, and how that is known ("header:<name>" or "connection").
        "backend": result.backend,
        "backend_source": result.backend_source,
    }
    metrics = {
        name: {"value": value, "unit": UNITS[name]} for name, value in result.metrics.items()
    }
    return {
        "metadata": metadata,
        "metrics": metrics,
        "error": None
        if error is None
        else {"code": error.code, "type": error.type, "message": error.message},
    }


def cut_record(cut: Cut) -> dict[str, Any]:
    """A censored request as its record says it: how long it had waited, and whether a first
    token came (when and how many tokens followed); None where nothing is known."""
    stamps = cut.stamps_ms
    return {
        "waited_ms": cut.waited_ms,
        "first_token": None if stamps is None else bool(stamps),
        f"{TIME_TO_FIRST_TOKEN.name}_ms": stamps[0] if stamps else None,
        "output_tokens": None if stamps is None else len(stamps),
    }


class RecordWriter:
    """Whole lines or nothing: after a write error (a full disk, a file-size limit) the file is
    cut back to its last complete line and later writes are dropped, so what is on disk stays
    valid JSON lines. `error` says what went wrong, for the run to end on."""

    def __init__(self, path: Path):
        self.path = path
        self._file = path.open("wb", buffering=1 << 20)
        self._encode = msgspec.json.Encoder().encode
        self.count = 0
        self.error: OSError | None = None

    def write(self, line: dict[str, Any]) -> None:
        if self.error is not None:
            return
        try:
            self._file.write(self._encode(line) + b"\n")
        except OSError as e:
            self._broken(e)
        else:
            self.count += 1

    def flush(self) -> None:
        if self.error is None:
            try:
                self._file.flush()
            except OSError as e:
                self._broken(e)

    def close(self) -> None:
        self.flush()
        with contextlib.suppress(OSError):  # broken: the buffer it would flush is dropped
            self._file.close()

    def _broken(self, error: OSError) -> None:
        self.error = error
        with contextlib.suppress(OSError):
            self._file.close()
        with contextlib.suppress(OSError):
            cut_to_last_line(self.path)


def cut_to_last_line(path: Path) -> None:
    """Truncate a file after its last newline, dropping a line a failed write left half done."""
    with path.open("rb+") as f:
        end = f.seek(0, 2)
        while end > 0:
            start = max(0, end - (1 << 16))
            f.seek(start)
            newline = f.read(end - start).rfind(b"\n")
            if newline >= 0:
                f.truncate(start + newline + 1)
                return
            end = start
        f.truncate(0)
