"""Every metric dagperf reports, named once: its name, unit and label, as AIPerf users know them,
which way is better, and whether only a streamed reply measures it.

Per-request metrics are computed by the worker that sent the request and travel in its result;
aggregates are computed by the scheduler over a phase. Names, units and labels match AIPerf's
exports (the label is the header of its CSV and console table), so scripts written for
`profile_export.jsonl` and `profile_export_aiperf.json` keep working.

Code names a metric by its entry (`catalog.TIME_TO_FIRST_TOKEN.name`), never by a string of its
own, so a misspelt metric is an AttributeError and a mypy error rather than a key never found.
The tables below group the entries by kind, in the order the exports list them; the console,
the report and the searches choose their own rows from the entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    unit: str
    label: str
    #: Which way a change is an improvement (for comparisons of runs, and whether an objective
    #: is a ceiling or a floor); None for what has no better direction (lengths, counts).
    better: Literal["lower", "higher"] | None = None
    #: Measured only on a streamed reply: a reply that comes whole has no token times.
    streamed: bool = False

    @property
    def ceiling(self) -> bool:
        """An objective on it is a ceiling (the value must not exceed it), unless higher is
        better, when it is a floor."""
        return self.better != "higher"


def _table(*metrics: Metric) -> dict[str, Metric]:
    return {m.name: m for m in metrics}


# Per-request values, aggregated over requests (list values are aggregated over every element).
REQUEST_LATENCY = Metric("request_latency", "ms", "Request Latency", better="lower")
TIME_TO_FIRST_TOKEN = Metric(
    "time_to_first_token", "ms", "Time to First Token", better="lower", streamed=True
)
TIME_TO_SECOND_TOKEN = Metric(
    "time_to_second_token", "ms", "Time to Second Token", better="lower", streamed=True
)
INTER_TOKEN_LATENCY = Metric(
    "inter_token_latency", "ms", "Inter Token Latency", better="lower", streamed=True
)
INTER_CHUNK_LATENCY = Metric(
    "inter_chunk_latency", "ms", "Inter Chunk Latency", better="lower", streamed=True
)
OUTPUT_TOKEN_THROUGHPUT_PER_USER = Metric(
    "output_token_throughput_per_user",
    "tokens/sec/user",
    "Output Token Throughput Per User",
    better="higher",
    streamed=True,
)
OUTPUT_SEQUENCE_LENGTH = Metric("output_sequence_length", "tokens", "Output Sequence Length")
INPUT_SEQUENCE_LENGTH = Metric("input_sequence_length", "tokens", "Input Sequence Length")
REASONING_TOKEN_COUNT = Metric("reasoning_token_count", "tokens", "Reasoning Token Count")
USAGE_PROMPT_TOKENS = Metric("usage_prompt_tokens", "tokens", "Usage Prompt Tokens")
USAGE_COMPLETION_TOKENS = Metric("usage_completion_tokens", "tokens", "Usage Completion Tokens")
USAGE_PROMPT_CACHE_READ_TOKENS = Metric(
    "usage_prompt_cache_read_tokens", "tokens", "Usage Prompt Cache Read Tokens"
)
USAGE_REASONING_TOKENS = Metric("usage_reasoning_tokens", "tokens", "Usage Reasoning Tokens")
ERROR_ISL = Metric("error_isl", "tokens", "Error Input Sequence Length")

# One value per phase.
REQUEST_THROUGHPUT = Metric(
    "request_throughput", "requests/sec", "Request Throughput", better="higher"
)
OUTPUT_TOKEN_THROUGHPUT = Metric(
    "output_token_throughput", "tokens/sec", "Output Token Throughput", better="higher"
)
REQUEST_COUNT = Metric("request_count", "requests", "Request Count")
ERROR_REQUEST_COUNT = Metric(
    "error_request_count", "requests", "Error Request Count", better="lower"
)
REQUEST_ERROR_RATE = Metric("request_error_rate", "%", "Request Error Rate", better="lower")
CUT_REQUEST_COUNT = Metric("cut_request_count", "requests", "Cut Request Count")
BENCHMARK_DURATION = Metric("benchmark_duration", "sec", "Benchmark Duration")
TOTAL_ISL = Metric("total_isl", "tokens", "Total Input Sequence Length")
TOTAL_OSL = Metric("total_osl", "tokens", "Total Output Sequence Length")

# Reported only when --goodput sets service-level objectives.
GOODPUT = Metric("goodput", "requests/sec", "Goodput", better="higher")
GOOD_REQUEST_COUNT = Metric("good_request_count", "requests", "Good Request Count", better="higher")

# Per session (a root with its FORK tree and SPAWNed children; `dagperf.metrics.sessions`).
SESSION_DURATION = Metric("session_duration", "ms", "Session Duration", better="lower")
SESSION_COUNT = Metric("session_count", "sessions", "Session Count")
INCOMPLETE_SESSION_COUNT = Metric(
    "incomplete_session_count", "sessions", "Incomplete Session Count"
)
GOOD_SESSION_COUNT = Metric("good_session_count", "sessions", "Good Session Count", better="higher")
SESSION_GOODPUT = Metric("session_goodput", "sessions/sec", "Session Goodput", better="higher")
CANCELLED_SESSION_COUNT = Metric("cancelled_session_count", "sessions", "Cancelled Session Count")
CANCELLED_REQUEST_COUNT = Metric("cancelled_request_count", "requests", "Cancelled Request Count")

#: Per-request values, in the order the summary lists them.
RECORD = _table(
    REQUEST_LATENCY,
    TIME_TO_FIRST_TOKEN,
    TIME_TO_SECOND_TOKEN,
    INTER_TOKEN_LATENCY,
    INTER_CHUNK_LATENCY,
    OUTPUT_TOKEN_THROUGHPUT_PER_USER,
    OUTPUT_SEQUENCE_LENGTH,
    INPUT_SEQUENCE_LENGTH,
    REASONING_TOKEN_COUNT,
    USAGE_PROMPT_TOKENS,
    USAGE_COMPLETION_TOKENS,
    USAGE_PROMPT_CACHE_READ_TOKENS,
    USAGE_REASONING_TOKENS,
    ERROR_ISL,
)
#: One value per phase, always reported.
AGGREGATE = _table(
    REQUEST_THROUGHPUT,
    OUTPUT_TOKEN_THROUGHPUT,
    REQUEST_COUNT,
    ERROR_REQUEST_COUNT,
    REQUEST_ERROR_RATE,
    CUT_REQUEST_COUNT,
    BENCHMARK_DURATION,
    TOTAL_ISL,
    TOTAL_OSL,
)
#: Per session, in the summary.
SESSION = _table(
    SESSION_DURATION,
    SESSION_COUNT,
    INCOMPLETE_SESSION_COUNT,
    GOOD_SESSION_COUNT,
    SESSION_GOODPUT,
    CANCELLED_SESSION_COUNT,
    CANCELLED_REQUEST_COUNT,
)
#: One value per phase, each `{unit, avg}` in the summary: the aggregates, goodput and the
#: session counts.
SCALARS = (
    AGGREGATE
    | _table(GOODPUT, GOOD_REQUEST_COUNT)
    | {name: m for name, m in SESSION.items() if m is not SESSION_DURATION}
)
#: Every metric the summary may report, by name.
METRICS = RECORD | SCALARS | _table(SESSION_DURATION)
UNITS = {name: m.unit for name, m in METRICS.items()}

#: What a search objective may name besides the summary's metrics: the share of the window's
#: requests the endpoint failed, as a fraction (the summary's `request_error_rate` is in %).
ERROR_RATE = Metric("error_rate", "fraction", "Error Rate", better="lower")

#: Metrics a --goodput objective may name: True when the objective is a ceiling (lower is
#: better), False when it is a floor.
OBJECTIVE_IS_CEILING = {
    m.name: m.ceiling
    for m in (
        TIME_TO_FIRST_TOKEN,
        TIME_TO_SECOND_TOKEN,
        INTER_TOKEN_LATENCY,
        REQUEST_LATENCY,
        OUTPUT_TOKEN_THROUGHPUT_PER_USER,
    )
}

#: The percentiles every distribution reports (p1 ... p99), as AIPerf's exports do.
PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)
