"""One run directory, read for the report: the summary as written, and the per-request figures
a chart needs, read in one streaming pass over `profile_export.jsonl`.

Everything counted (distributions, throughput, sibling groups) comes from every profiling
record; only the requests of the trees the timeline draws are kept whole, so memory grows with
what is drawn plus a few numbers per request, not with the size of the records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from dagperf.vocabulary import catalog

SUMMARY = "profile_export_aiperf.json"
RECORDS = "profile_export.jsonl"
SESSIONS = "session_export.jsonl"
HEALTH = "health_check.json"


class ReportError(Exception):
    """A run directory the report cannot be made from; the message names what is missing."""


class _Meta(msgspec.Struct):
    conversation_id: str = ""
    turn_index: int = 0
    x_request_id: str = ""
    x_correlation_id: str = ""
    root_correlation_id: str | None = None
    parent_correlation_id: str | None = None
    branch_mode: str | None = None
    depends_on: list[str] = []
    delay_ms: float = 0.0
    request_start_ns: int = 0
    request_end_ns: int | None = None
    agent_depth: int = 0
    backend: str | None = None
    benchmark_phase: str = "profiling"
    cut: dict[str, Any] | None = None  # cut short by the run: not an error


class _Value(msgspec.Struct):
    value: float | list[float]


class _Error(msgspec.Struct):
    type: str | None = None
    code: int | None = None


class _Record(msgspec.Struct):
    metadata: _Meta
    metrics: dict[str, _Value] = {}
    error: _Error | None = None


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a drawn tree, as the timeline needs it."""

    request_id: str
    conversation: str  # the conversation's id in the dataset
    instance: str  # this run of that conversation (its correlation id)
    parent: str | None  # the instance that forked or spawned it
    turn: int
    mode: str | None  # fork, spawn or None for a root's own turns
    depends_on: tuple[str, ...]
    delay_ms: float
    start_ns: int
    end_ns: int
    ttft_ms: float | None
    latency_ms: float | None
    error: str | None
    backend: str | None


@dataclass(slots=True)
class Run:
    label: str
    directory: Path
    summary: dict[str, Any]
    health: dict[str, Any] | None
    sessions: list[dict[str, Any]]  # slowest first
    values: dict[str, np.ndarray]  # per-request metric values of successful requests
    ends_s: np.ndarray  # each profiling request's end, s after the first start
    output_tokens: np.ndarray  # aligned with ends_s
    failed: np.ndarray  # aligned with ends_s: the endpoint's failures (not cut requests)
    siblings: list[tuple[float, float]]  # FORK sibling groups: (first child, mean of others)
    sibling_metric: catalog.Metric  # what the siblings are compared on
    trees: dict[str, list[Request]] = field(default_factory=dict)  # drawn roots, slowest first


DRAWN_METRICS = (catalog.TIME_TO_FIRST_TOKEN, catalog.INTER_TOKEN_LATENCY, catalog.REQUEST_LATENCY)


def load_run(directory: Path, label: str, draw_trees: int = 40) -> Run:
    """The run in `directory`; its `draw_trees` slowest trees kept whole for the timeline."""
    if not directory.is_dir():
        raise ReportError(f"{directory}: not a directory")
    summary = _json(directory / SUMMARY)
    if not isinstance(summary, dict):
        raise ReportError(f"{directory / SUMMARY}: not a JSON object")
    health = _json(directory / HEALTH) if (directory / HEALTH).exists() else None
    sessions = _sessions(directory / SESSIONS)
    drawn = [s["root_correlation_id"] for s in sessions[:draw_trees]]
    run = Run(
        label=label,
        directory=directory,
        summary=summary,
        health=health if isinstance(health, dict) else None,
        sessions=sessions,
        values={},
        ends_s=np.empty(0),
        output_tokens=np.empty(0),
        failed=np.empty(0, dtype=bool),
        siblings=[],
        sibling_metric=catalog.REQUEST_LATENCY,
        trees={root: [] for root in drawn},
    )
    _read_records(directory / RECORDS, run)
    return run


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        raise ReportError(f"{path}: missing (is this a dagperf run directory?)") from None
    except (OSError, ValueError) as e:
        raise ReportError(f"{path}: unreadable: {e}") from None


def _sessions(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    with path.open("rb") as f:
        for number, line in enumerate(f, 1):
            try:
                out.append(json.loads(line))
            except ValueError as e:
                raise ReportError(f"{path}:{number}: not JSON: {e}") from None
    out.sort(key=lambda s: -(s.get("duration_ms") or 0.0))
    return out


def _metric(record: _Record, metric: catalog.Metric) -> float | None:
    found = record.metrics.get(metric.name)
    return found.value if found is not None and isinstance(found.value, float | int) else None


class _Reader:
    """What one pass over the records collects."""

    def __init__(self, run: Run):
        self.run = run
        self.values: dict[str, list[float]] = {m.name: [] for m in DRAWN_METRICS}
        self.first_start: int | None = None
        self.ends: list[int] = []
        self.tokens: list[float] = []
        self.failed: list[bool] = []
        self.forks: dict[str, list[tuple[int, float, float | None]]] = {}

    def add(self, record: _Record) -> None:
        metadata = record.metadata
        end = metadata.request_end_ns or metadata.request_start_ns
        if self.first_start is None or metadata.request_start_ns < self.first_start:
            self.first_start = metadata.request_start_ns
        self.ends.append(end)
        self.tokens.append(_metric(record, catalog.OUTPUT_SEQUENCE_LENGTH) or 0.0)
        self.failed.append(record.error is not None and metadata.cut is None)
        ttft = _metric(record, catalog.TIME_TO_FIRST_TOKEN)
        latency = _metric(record, catalog.REQUEST_LATENCY)
        if record.error is None:
            for metric in DRAWN_METRICS:
                if (v := _metric(record, metric)) is not None:
                    self.values[metric.name].append(v)
            if metadata.branch_mode == "fork" and metadata.turn_index == 0 and metadata.depends_on:
                speed = ttft if ttft is not None else latency
                if speed is not None:
                    group = self.forks.setdefault(metadata.depends_on[0], [])
                    group.append((metadata.request_start_ns, speed, ttft))
        tree = self.run.trees.get(metadata.root_correlation_id or "")
        if tree is not None:
            tree.append(_request(record, end, ttft, latency))

    def finish(self) -> None:
        run = self.run
        run.values = {k: np.asarray(v, dtype=float) for k, v in self.values.items() if v}
        first = self.first_start or 0
        run.ends_s = (np.asarray(self.ends, dtype=np.int64) - first) / 1e9
        run.output_tokens = np.asarray(self.tokens, dtype=float)
        run.failed = np.asarray(self.failed, dtype=bool)
        with_ttft = any(g[0][2] is not None for g in self.forks.values() if g)
        run.sibling_metric = catalog.TIME_TO_FIRST_TOKEN if with_ttft else catalog.REQUEST_LATENCY
        for group in self.forks.values():
            if len(group) > 1:
                group.sort()
                others = [speed for _, speed, _ in group[1:]]
                run.siblings.append((group[0][1], sum(others) / len(others)))


def _request(record: _Record, end: int, ttft: float | None, latency: float | None) -> Request:
    metadata = record.metadata
    return Request(
        request_id=metadata.x_request_id,
        conversation=metadata.conversation_id,
        instance=metadata.x_correlation_id,
        parent=metadata.parent_correlation_id,
        turn=metadata.turn_index,
        mode=metadata.branch_mode,
        depends_on=tuple(metadata.depends_on),
        delay_ms=metadata.delay_ms,
        start_ns=metadata.request_start_ns,
        end_ns=end,
        ttft_ms=ttft,
        latency_ms=latency,
        error=_error(record),
        backend=metadata.backend,
    )


def _error(r: _Record) -> str | None:
    if r.error is None:
        return None
    if r.metadata.cut is not None:
        return "cut short by the run"
    return r.error.type or f"HTTP {r.error.code}"


def _read_records(path: Path, run: Run) -> None:
    decoder = msgspec.json.Decoder(_Record)
    reader = _Reader(run)
    try:
        f = path.open("rb")
    except OSError as e:
        raise ReportError(f"{path}: {e.strerror or e}") from None
    with f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = decoder.decode(line)
            except msgspec.DecodeError as e:
                raise ReportError(f"{path}:{number}: not a dagperf record: {e}") from None
            if record.metadata.benchmark_phase == "profiling":
                reader.add(record)
    reader.finish()
