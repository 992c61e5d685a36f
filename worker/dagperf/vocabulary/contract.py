"""What a scheduler tells the operator: its /status while the run goes, and its final report (the
`--summary-file`, which the operator reads from the pod's termination message) at the end.

Both sides use these types, so a field renamed on one side cannot go missing on the other. The
wire shape is the camelCase of the Benchmark resource's status, so the operator copies values
without translating them. The final report must fit a termination message (4 KB); `compact()`
shortens it by type, dropping the parts the operator can live without, never its progress.
"""

from __future__ import annotations

from enum import StrEnum

import msgspec

SUMMARY_LIMIT = 4000  # bytes; Kubernetes keeps at most 4096 of a termination message
REASON_LIMIT = 200  # characters of a reason kept when the report must shrink


class RunState(StrEnum):
    WAITING = "waiting for workers"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"  # ended on request (POST /stop): not a failure
    CANCELLED = "cancelled"  # interrupted (SIGINT, SIGTERM) before its end


class _Camel(msgspec.Struct, rename="camel"):
    pass


class Workers(_Camel):
    desired: int
    registered: int


class Progress(_Camel):
    requests_completed: int = 0  # answered, failed or cut
    requests_total: int | None = None
    errors: int = 0  # the endpoint's failures
    requests_sent: int = 0
    in_flight: int = 0
    cut: int = 0  # cut short by the run itself (its duration, a stop): not errors


class MetricsSummary(_Camel, omit_defaults=True):
    """Throughput, TTFT and ITL percentiles (ms) and the error rate (a fraction)."""

    request_throughput: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    error_rate: float | None = None


class StatusReport(_Camel):
    """GET /status."""

    state: RunState
    phase: str  # the dispatcher's phase: warmup, profiling, draining...
    workers: Workers
    progress: Progress
    branch_stats: dict[str, int] = {}
    summary: MetricsSummary = msgspec.field(default_factory=MetricsSummary)
    failure: str | None = None


class SearchStep(_Camel, omit_defaults=True):
    value: float
    meets_slo: bool
    verdict: str | None = None  # meets, misses or undecided (too little measured to say)


class SearchReport(_Camel):
    """A capacity search's answer (`dagperf search`): the highest load that met every objective
    (None: none did) and each step tried, in order."""

    parameter: str
    slo: list[str]
    best: float | None
    steps: list[SearchStep] = []


class FinalReport(_Camel):
    """The run's last word, written to --summary-file."""

    outcome: RunState
    reason: str | None
    progress: Progress
    summary: MetricsSummary = msgspec.field(default_factory=MetricsSummary)
    benchmark: str | None = None
    duration_seconds: float | None = None
    branch_stats: dict[str, int] = {}
    results_path: str | None = None
    search: SearchReport | None = None  # a search's answer and steps

    def compact(self) -> bytes:
        """JSON under SUMMARY_LIMIT bytes: the reason is cut first, then what the operator
        can do without (branch counts, paths, a search's steps), never the outcome, progress,
        summary or a search's answer."""
        text = msgspec.json.encode(self)
        if len(text) <= SUMMARY_LIMIT:
            return text
        reason = self.reason
        if reason is not None and len(reason) > REASON_LIMIT:
            reason = reason[:REASON_LIMIT] + "..."
        shorter = msgspec.structs.replace(self, reason=reason)
        text = msgspec.json.encode(shorter)
        if len(text) <= SUMMARY_LIMIT:
            return text
        search = self.search and msgspec.structs.replace(self.search, steps=[])
        return msgspec.json.encode(
            msgspec.structs.replace(
                shorter, branch_stats={}, results_path=None, benchmark=None, search=search
            )
        )


def decode_status(data: bytes) -> StatusReport | None:
    try:
        return msgspec.json.decode(data, type=StatusReport)
    except msgspec.DecodeError:
        return None


def decode_final(text: str | None) -> FinalReport | None:
    """The final report a termination message holds, if it holds one."""
    if not text:
        return None
    try:
        return msgspec.json.decode(text, type=FinalReport)
    except msgspec.DecodeError:
        return None
