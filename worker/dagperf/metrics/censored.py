"""Objectives judged on censored observations: met, missed, or undecided, and why.

A request the run cuts short (its duration's grace period, a stop, an interrupt) is a censored
observation, as survival analysis has it: its time to first token is known exactly if the
first token came, and otherwise only to be at least the time it had waited; its latency is
always at least its wait. Dropping it would keep only the requests fast enough to finish (a
step cut while a fifth of its requests still waited for a first token reported a p90 of the
others); counting it as an error would blame the endpoint for the run's own stop. Each metric
here keeps its exact values and, apart, the lower bounds of its censored ones (`Censored`).

A statistic then has two bounds: the lowest it can be (every censored value at its bound, every
value not yet known at 0) and the highest (every one of them infinite). An objective is

- met when it holds at the highest (for a floor, the lowest): whatever the censored values turn
  out to be;
- missed when it fails at the lowest (for a floor, the highest): whatever they turn out to be;
- undecided otherwise, and when too few values were measured.

For a percentile, the bounds are those of the percentile of the population the step sampled,
at a confidence level (95% by default) each side, from order statistics (distribution-free:
the k-th smallest of n values lies above the q-quantile with the probability that a
Binomial(n, q) count is below k). So "meets p90 <= 500 ms" says: with 95% confidence, the
server's p90 under this load is at most 500 ms, whatever the cut requests would have shown;
it needs at least 29 values (0.9^29 < 5%), more when some are censored or far from the
objective, and a clear miss is told from a handful. `avg`, `min`, `max` and the error rate are
bounded on the sample as measured and need `MIN_VALUES` values before either verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dagperf.metrics.summary import Distribution
from dagperf.verdict import Verdict

MIN_VALUES = 20  # before an average, an extreme or a rate decides anything
CONFIDENCE = 0.95


class Objective(Protocol):
    """What a verdict judges: `stat` of `metric` against `value`, a ceiling or a floor."""

    @property
    def metric(self) -> str: ...
    @property
    def stat(self) -> str: ...
    @property
    def value(self) -> float: ...
    @property
    def ceiling(self) -> bool: ...


class Censored:
    """One metric's values: exact ones, and censored ones known only to be at least a bound."""

    __slots__ = ("censored", "exact", "lows")

    def __init__(self) -> None:
        self.exact = Distribution()
        self.lows = Distribution()  # every exact value, and each censored one's bound
        self.censored = 0

    def add(self, value: float) -> None:
        self.exact.add(value)
        self.lows.add(value)

    def add_at_least(self, bound: float) -> None:
        self.lows.add(max(bound, 0.0))
        self.censored += 1

    @property
    def count(self) -> int:
        return self.lows.count

    def sample_bounds(self, stat: str, unknown: int = 0) -> tuple[float, float]:
        """The lowest and highest the sample's `stat` can be, whatever the censored values and
        `unknown` more values (anything from 0 up) turn out to be; nan with no value at all."""
        n, open_ended = self.count + unknown, self.censored + unknown
        if n == 0:
            return math.nan, math.nan
        lows, exact = self.lows, self.exact
        if stat == "avg":
            low = lows.sum / n
            high = math.inf if open_ended else exact.sum / exact.count
        elif stat == "min":
            low = 0.0 if unknown else lows.min
            high = exact.min if exact.count else math.inf
        elif stat == "max":
            low = max(lows.max if lows.count else 0.0, 0.0)
            high = math.inf if open_ended else exact.max
        else:
            rank = float(stat[1:]) / 100 * (n - 1)  # numpy's linear method, on n values
            low = _interpolated(lows, rank, zeros=unknown)
            high = _interpolated(exact, rank, zeros=0)
        return low, high

    def percentile_bounds(
        self, percent: float, confidence: float, unknown: int = 0
    ) -> tuple[float, float]:
        """Bounds on the sampled population's percentile, each holding with `confidence`,
        whatever the censored and `unknown` values are: an order statistic of the lowest
        values they can take, and one of the highest; 0 and inf where n values cannot say."""
        n = self.count + unknown
        if n == 0:
            return math.nan, math.nan
        lower, upper = order_statistics(n, percent / 100, confidence)
        low = 0.0 if lower == 0 else _ranked(self.lows, lower - 1, zeros=unknown)
        high = math.inf if upper > self.exact.count else _ranked(self.exact, upper - 1, zeros=0)
        return low, high


def order_statistics(n: int, q: float, confidence: float) -> tuple[int, int]:
    """(j, k), 1-based: the j-th smallest of n values lies at or below the q-quantile, and the
    k-th smallest at or above it, each with probability `confidence` at least; j = 0 and
    k = n + 1 when no order statistic is sure enough."""
    cdf = _binomial_cdf(n, q)  # cdf[m] = P(Binomial(n, q) <= m)
    # P(X_(k) >= quantile) = P(fewer than k values below it) = cdf[k - 1]
    k = int(np.searchsorted(cdf, confidence - 1e-12)) + 1
    # P(X_(j) <= quantile) = P(at least j values at or below it) = 1 - cdf[j - 1]
    j = int(np.searchsorted(cdf, 1 - confidence + 1e-12, side="right"))
    return j, min(k, n + 1)


def _binomial_cdf(n: int, q: float) -> np.ndarray:
    k = np.arange(n + 1)
    log_factorial = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n + 1)))))
    log_pmf = log_factorial[n] - log_factorial[k] - log_factorial[n - k]
    log_pmf += k * math.log(q) + (n - k) * math.log1p(-q)
    cdf: np.ndarray = np.cumsum(np.exp(log_pmf))
    return cdf


def _ranked(values: Distribution, index: int, zeros: int) -> float:
    """The value at 0-based `index` in sorted order of `values` after `zeros` zeros, followed
    by as many infinities as it takes."""
    if index < zeros:
        return 0.0
    index -= zeros
    return values.ranked(index) if index < values.count else math.inf


def _interpolated(values: Distribution, rank: float, zeros: int) -> float:
    below, above = math.floor(rank), math.ceil(rank)
    low = _ranked(values, below, zeros)
    if above == below:
        return low
    high = _ranked(values, above, zeros)
    if math.isinf(high):
        return high
    return low + (high - low) * (rank - below)


@dataclass(frozen=True)
class Judgement:
    """An objective's verdict on one step, with the figures behind it."""

    objective: str
    verdict: Verdict
    low: float  # the sample's statistic, at its lowest and highest (censored values open)
    high: float
    values: int  # observations, censored ones included
    censored: int
    why: str | None = None  # for an undecided verdict

    @property
    def figure(self) -> float | None:
        """The sample's statistic, when the censored values leave it one value."""
        return self.low if self.low == self.high and math.isfinite(self.low) else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective,
            "verdict": self.verdict.value,
            "figure": self.figure,
            "low": _finite(self.low),
            "high": _finite(self.high),  # None: no upper bound
            "values": self.values,
            "censored": self.censored,
            "why": self.why,
        }


def judge(
    objective: Objective,
    sample: Censored,
    confidence: float = CONFIDENCE,
    unknown: int = 0,
    name: str | None = None,
) -> Judgement:
    """Met, missed or undecided (see the module's rule); `unknown` values are still to come."""
    name = name or f"{objective.metric}:{objective.stat}:{objective.value:g}"
    n = sample.count + unknown
    censored = sample.censored + unknown
    low, high = sample.sample_bounds(objective.stat, unknown)
    if n == 0:
        return Judgement(name, Verdict.UNDECIDED, low, high, 0, 0, "nothing was measured")
    percentile = objective.stat.startswith("p")
    if percentile:
        decide_low, decide_high = sample.percentile_bounds(
            float(objective.stat[1:]), confidence, unknown
        )
    elif n < MIN_VALUES:
        short = f"{n} values measured; {objective.stat} needs {MIN_VALUES}"
        return Judgement(name, Verdict.UNDECIDED, low, high, n, censored, short)
    else:
        decide_low, decide_high = low, high
    verdict = decide(objective.ceiling, objective.value, decide_low, decide_high)
    if verdict is not Verdict.UNDECIDED:
        return Judgement(name, verdict, low, high, n, censored)
    why = _why(objective, n, censored, decide_low, decide_high, confidence if percentile else None)
    return Judgement(name, verdict, low, high, n, censored, why)


def decide(ceiling: bool, threshold: float, low: float, high: float) -> Verdict:
    """A ceiling holds when even `high` is within it and fails when even `low` passes it; a
    floor the other way round."""
    holds, fails = (
        (high <= threshold, low > threshold) if ceiling else (low >= threshold, high < threshold)
    )
    if holds:
        return Verdict.MEETS
    return Verdict.MISSES if fails else Verdict.UNDECIDED


def _why(
    o: Objective, n: int, censored: int, low: float, high: float, confidence: float | None
) -> str:
    span = f"{o.stat} lies between {_shown(low)} and {_shown(high)}"
    if confidence is not None:
        span += f" ({confidence:.0%} confidence)"
    side = f"{n} values" + (f", {censored} of them censored or still to come" if censored else "")
    return f"{span}, across {o.value:g}: {side}"


def _shown(value: float) -> str:
    return "no upper bound" if math.isinf(value) else f"{value:,.4g}"


def _finite(value: float) -> float | None:
    return None if math.isnan(value) or math.isinf(value) else value
