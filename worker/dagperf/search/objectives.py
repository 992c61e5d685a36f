"""Service-level objectives for a search: `METRIC:STAT:VALUE`, judged on a run's summary.

METRIC is a per-request metric of the summary (`time_to_first_token`, `inter_token_latency`,
`request_latency`, ...), `session_duration`, or `error_rate` (a fraction of requests; STAT is
then `avg` or `max`, the same value). STAT is `avg`, `min`, `max` or a percentile the summary
reports (p1, p5, p10, p25, p50, p75, p90, p95, p99). Times are in ms. An objective is a ceiling
(the value must not exceed it), except for `output_token_throughput_per_user`, a floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dagperf.metrics.catalog import OBJECTIVE_IS_CEILING, PERCENTILES, RECORD

STATS = ("avg", "min", "max", *(f"p{p}" for p in PERCENTILES))
SESSION_METRICS = ("session_duration",)
METRICS = (*RECORD, *SESSION_METRICS, "error_rate")
STREAMED = ("time_to_first_token", "time_to_second_token", "inter_token_latency",
            "inter_chunk_latency", "output_token_throughput_per_user")  # fmt: skip
TAIL_SAMPLES = 10  # values beyond a percentile a step measures, at the least
MIN_SAMPLES = 20


@dataclass(frozen=True)
class Objective:
    metric: str
    stat: str
    value: float

    @property
    def ceiling(self) -> bool:
        return OBJECTIVE_IS_CEILING.get(self.metric, True)

    @property
    def samples(self) -> int:
        """Values a step needs for this statistic to mean something: `TAIL_SAMPLES` beyond
        a percentile (1,000 requests for a p99), and `MIN_SAMPLES` at the least."""
        if self.stat.startswith("p"):
            tail = 100 - int(self.stat[1:])
            return max(MIN_SAMPLES, math.ceil(TAIL_SAMPLES * 100 / tail))
        return MIN_SAMPLES

    def measured(self, document: dict[str, Any]) -> float | None:
        """The figure in a run's summary, or None when the run has none."""
        if self.metric == "error_rate":
            rate = document.get("request_error_rate")
            return None if rate is None else rate["avg"] / 100
        stats = document.get(self.metric)
        if not stats or self.stat not in stats:
            return None
        value = stats[self.stat]
        return None if value is None or math.isnan(value) else float(value)

    def met_by(self, value: float | None) -> bool:
        if value is None:
            return False  # no figure (every request failed, say) meets nothing
        return value <= self.value if self.ceiling else value >= self.value

    def __str__(self) -> str:
        return f"{self.metric}:{self.stat}:{self.value:g}"


def parse_objectives(text: str) -> list[Objective]:
    """Objectives from `--slo`; a ValueError names what is wrong with which one."""
    objectives = []
    for item in text.split():
        parts = item.split(":")
        if len(parts) != 3:
            raise ValueError(f"expected METRIC:STAT:VALUE, got {item!r}")
        metric, stat, raw = parts
        if metric not in METRICS:
            raise ValueError(f"{item!r}: unknown metric {metric!r} (one of {', '.join(METRICS)})")
        allowed = ("avg", "max") if metric == "error_rate" else STATS
        if stat not in allowed:
            raise ValueError(f"{item!r}: STAT must be one of {', '.join(allowed)}")
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{item!r}: VALUE must be a number") from None
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{item!r}: VALUE must be a finite number, 0 or more")
        objectives.append(Objective(metric, stat, value))
    if not objectives:
        raise ValueError("give at least one objective, e.g. time_to_first_token:p99:500")
    return objectives


def unmeasurable(objectives: list[Objective], streaming: bool) -> str | None:
    """Why a run with these settings cannot measure an objective, if it cannot."""
    for o in objectives:
        if o.metric in STREAMED and not streaming:
            return f"{o} needs --streaming: without it a reply comes whole, with no token times"
    return None


def judge(objectives: list[Objective], document: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Whether a run's summary meets every objective, and the figure for each."""
    figures = {str(o): o.measured(document) for o in objectives}
    return all(o.met_by(figures[str(o)]) for o in objectives), figures
