"""Service-level objectives for a search: `METRIC:STAT:VALUE`, read and checked here, judged on
each step's window (`dagperf.metrics.censored`, `dagperf.metrics.window`).

METRIC is a per-request metric of the summary (`time_to_first_token`, `inter_token_latency`,
`request_latency`, ...), `session_duration`, or `error_rate` (a fraction of requests; STAT is
then `avg` or `max`, the same value). STAT is `avg`, `min`, `max` or a percentile the summary
reports (p1, p5, p10, p25, p50, p75, p90, p95, p99). Times are in ms. An objective is a ceiling
(the value must not exceed it), except on a metric higher is better of
(`output_token_throughput_per_user`), a floor. A streamed metric needs `--streaming`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dagperf.vocabulary import catalog

STATS = ("avg", "min", "max", *(f"p{p}" for p in catalog.PERCENTILES))
METRICS = (*catalog.RECORD, catalog.SESSION_DURATION.name, catalog.ERROR_RATE.name)


@dataclass(frozen=True)
class Objective:
    metric: str
    stat: str
    value: float

    @property
    def ceiling(self) -> bool:
        metric = catalog.METRICS.get(self.metric)
        return metric is None or metric.ceiling

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
        allowed = ("avg", "max") if metric == catalog.ERROR_RATE.name else STATS
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
        example = f"{catalog.TIME_TO_FIRST_TOKEN.name}:p99:500"
        raise ValueError(f"give at least one objective, e.g. {example}")
    return objectives


def unmeasurable(objectives: list[Objective], streaming: bool) -> str | None:
    """Why a run with these settings cannot measure an objective, if it cannot."""
    for o in objectives:
        metric = catalog.METRICS.get(o.metric)
        if metric is not None and metric.streamed and not streaming:
            return f"{o} needs --streaming: without it a reply comes whole, with no token times"
    return None
