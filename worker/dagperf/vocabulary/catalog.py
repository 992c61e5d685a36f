"""Every metric dagperf reports: its name, unit and label, as AIPerf users know them.

Per-request metrics are computed by the worker that sent the request and travel in its result;
aggregates are computed by the scheduler over a phase. Names and units match AIPerf's exports,
so scripts written for `profile_export.jsonl` and `profile_export_aiperf.json` keep working.
"""

from __future__ import annotations

from typing import NamedTuple


class Metric(NamedTuple):
    name: str
    unit: str
    label: str


def _table(*rows: tuple[str, str, str]) -> dict[str, Metric]:
    return {name: Metric(name, unit, label) for name, unit, label in rows}


#: Per-request values, aggregated over requests (list values are aggregated over every element).
RECORD = _table(
    ("request_latency", "ms", "Request Latency"),
    ("time_to_first_token", "ms", "Time to First Token"),
    ("time_to_second_token", "ms", "Time to Second Token"),
    ("inter_token_latency", "ms", "Inter Token Latency"),
    ("inter_chunk_latency", "ms", "Inter Chunk Latency"),
    ("output_token_throughput_per_user", "tokens/sec/user", "Output Token Throughput Per User"),
    ("output_sequence_length", "tokens", "Output Sequence Length"),
    ("input_sequence_length", "tokens", "Input Sequence Length"),
    ("reasoning_token_count", "tokens", "Reasoning Token Count"),
    ("usage_prompt_tokens", "tokens", "Usage Prompt Tokens"),
    ("usage_completion_tokens", "tokens", "Usage Completion Tokens"),
    ("usage_prompt_cache_read_tokens", "tokens", "Usage Prompt Cache Read Tokens"),
    ("usage_reasoning_tokens", "tokens", "Usage Reasoning Tokens"),
    ("error_isl", "tokens", "Error Input Sequence Length"),
)

#: One value per phase.
AGGREGATE = _table(
    ("request_throughput", "requests/sec", "Request Throughput"),
    ("output_token_throughput", "tokens/sec", "Output Token Throughput"),
    ("request_count", "requests", "Request Count"),
    ("error_request_count", "requests", "Error Request Count"),
    ("request_error_rate", "%", "Request Error Rate"),
    ("cut_request_count", "requests", "Cut Request Count"),
    ("benchmark_duration", "sec", "Benchmark Duration"),
    ("total_isl", "tokens", "Total Input Sequence Length"),
    ("total_osl", "tokens", "Total Output Sequence Length"),
)

#: Reported only when --goodput sets service-level objectives.
GOODPUT = _table(
    ("goodput", "requests/sec", "Goodput"),
    ("good_request_count", "requests", "Good Request Count"),
)

#: Per session (a root with its FORK tree and SPAWNed children; `dagperf.metrics.sessions`).
SESSION = _table(
    ("session_duration", "ms", "Session Duration"),
    ("session_count", "sessions", "Session Count"),
    ("incomplete_session_count", "sessions", "Incomplete Session Count"),
    ("good_session_count", "sessions", "Good Session Count"),
    ("session_goodput", "sessions/sec", "Session Goodput"),
    ("cancelled_session_count", "sessions", "Cancelled Session Count"),
    ("cancelled_request_count", "requests", "Cancelled Request Count"),
)

#: Metrics a --goodput objective may name: True when the objective is a ceiling (lower is
#: better), False when it is a floor.
OBJECTIVE_IS_CEILING = {
    "time_to_first_token": True,
    "time_to_second_token": True,
    "inter_token_latency": True,
    "request_latency": True,
    "output_token_throughput_per_user": False,
}

#: The percentiles every distribution reports (p1 ... p99), as AIPerf's exports do.
PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)

SCALARS = AGGREGATE | GOODPUT | {n: m for n, m in SESSION.items() if n != "session_duration"}
UNITS = {m.name: m.unit for m in (*RECORD.values(), *SCALARS.values())}

#: Which way a change is an improvement, for comparisons of runs; a metric not named here
#: (sequence lengths, counts of requests) has no better direction.
LOWER_IS_BETTER = frozenset(
    {
        "request_latency",
        "time_to_first_token",
        "time_to_second_token",
        "inter_token_latency",
        "inter_chunk_latency",
        "error_request_count",
        "request_error_rate",
        "session_duration",
    }
)
HIGHER_IS_BETTER = frozenset(
    {
        "request_throughput",
        "output_token_throughput",
        "output_token_throughput_per_user",
        "goodput",
        "good_request_count",
        "session_goodput",
        "good_session_count",
    }
)
