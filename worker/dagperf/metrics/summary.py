"""Summing up a phase: per-metric distributions and the run's aggregates, in bounded memory.

A `Distribution` keeps count, sum, min, max and variance exactly, and its values exactly up to
`EXACT_LIMIT`, so small runs get numpy's percentiles, the same figures a user computes from
`profile_export.jsonl`. Past the limit the values fold into a histogram of logarithmic buckets
0.1% wide: percentiles stay within 0.1% of the exact ones, and memory no longer grows with the
run, only with the spread of the values.

Adding a value only appends it to an array: every result adds some thirty, in the scheduler's
hot path. The statistics are computed in numpy over the values not yet counted when they are
read (merged with those of the values before, as Chan's parallel variance does), and past the
limit values fold into the buckets a few thousand at a time.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np

from dagperf.transport.protocol import ErrorInfo, Result
from dagperf.verdict import describe_error
from dagperf.vocabulary import catalog

EXACT_LIMIT = 65_536
FOLD_EVERY = 4096  # past the limit, values wait in the array until this many fold at once
SETTLE_EVERY = 1024  # results a PhaseSummary takes between checks of its distributions' limits
MAX_ERROR_KINDS = 100  # distinct error messages kept; messages can carry timings
_RATIO = 1.001
_LOG_RATIO = math.log(_RATIO)


class _Moments(NamedTuple):
    """Count, sum, extremes, mean and sum of squared deviations of some values."""

    n: int
    total: float
    min: float
    max: float
    mean: float
    m2: float

    @classmethod
    def of(cls, values: np.ndarray) -> _Moments:
        mean = float(values.mean())
        deviations = values - mean
        # Not np.dot: OpenBLAS hands a long vector to a thread that then spins (see dagperf's
        # __init__); called every heartbeat, that kept one spinning through the whole run.
        m2 = float(np.square(deviations).sum())
        return cls(
            len(values), float(values.sum()), float(values.min()), float(values.max()), mean, m2
        )

    def merge(self, other: _Moments) -> _Moments:
        n = self.n + other.n
        delta = other.mean - self.mean
        return _Moments(
            n,
            self.total + other.total,
            min(self.min, other.min),
            max(self.max, other.max),
            self.mean + delta * other.n / n,
            self.m2 + other.m2 + delta * delta * self.n * other.n / n,
        )


_NONE = _Moments(0, 0.0, math.inf, -math.inf, 0.0, 0.0)


class Distribution:
    __slots__ = ("_buckets", "_counted", "_integers", "_limit", "_moments", "_values", "_zeros")

    def __init__(self) -> None:
        # While exact, every value; past the limit, those not yet folded into the buckets.
        self._values: array[float] = array("d")
        self._limit = EXACT_LIMIT  # past EXACT_LIMIT values: FOLD_EVERY
        self._moments = _NONE  # of the values folded, and of the first `_counted` in `_values`
        self._counted = 0
        self._buckets: Counter[int] = Counter()  # signed bucket index -> count; 0 excluded
        self._zeros = 0
        self._integers: bool | None = None  # the values are ints: min and max are said so

    def add(self, value: float) -> None:
        values = self._values
        if self._integers is None:
            self._integers = type(value) is int
        values.append(value)
        if len(values) > self._limit:
            self._fold()

    def extend(self, many: Iterable[float]) -> None:
        values = self._values
        before = len(values)
        values.extend(many)
        if self._integers is None and len(values) > before:
            self._integers = type(values[before]) is int
        if len(values) > self._limit:
            self._fold()

    def sink(self) -> array[float] | None:
        """Where a hot loop may append values itself (None until the first value said whether
        they are ints), calling `settle` now and then so they stay bounded."""
        return None if self._integers is None else self._values

    def settle(self) -> None:
        """Fold what a `sink`'s appends took past the limit."""
        if len(self._values) > self._limit:
            self._fold()

    @property
    def _exact(self) -> array[float] | None:
        """Every value, while there are at most `EXACT_LIMIT`."""
        self.settle()
        return self._values if self._limit == EXACT_LIMIT else None

    def _count_values(self) -> _Moments:
        """The statistics, once the values not yet counted are."""
        values = self._values
        if self._counted < len(values):
            new = _Moments.of(np.frombuffer(values)[self._counted :])
            self._moments = new if not self._moments.n else self._moments.merge(new)
            self._counted = len(values)
        return self._moments

    def _fold(self) -> None:
        """Every value waiting goes into the buckets (all of them, at the first fold)."""
        self._count_values()
        values = np.frombuffer(self._values)
        self._zeros += int(np.count_nonzero(values == 0))
        values = values[values != 0]
        index = np.floor(np.log(np.abs(values)) / _LOG_RATIO).astype(np.int64)
        # Positive values take even keys, negative ones odd: one Counter, and order is restored
        # by decoding the keys when percentiles are asked for.
        keys, counts = np.unique(index * 2 + (values < 0), return_counts=True)
        self._buckets.update(dict(zip(keys.tolist(), counts.tolist(), strict=True)))
        del values, index  # no view of the array left: it can shrink
        del self._values[:]  # the same array: a `sink` stays valid
        self._counted = 0
        self._limit = FOLD_EVERY

    @property
    def count(self) -> int:
        return self._moments.n + len(self._values) - self._counted

    @property
    def sum(self) -> float:
        return self._count_values().total

    @property
    def min(self) -> float:
        return self._typed(self._count_values().min)

    @property
    def max(self) -> float:
        return self._typed(self._count_values().max)

    def _typed(self, value: float) -> float:
        if self._integers and float(value).is_integer():
            return int(value)
        return float(value)

    def percentiles(self, points: tuple[float, ...] = catalog.PERCENTILES) -> list[float]:
        if not self.count:
            return [math.nan] * len(points)
        if self._exact is not None:
            return [float(p) for p in np.percentile(np.frombuffer(self._exact), points)]
        return self._histogram_percentiles(points)

    def ranked(self, index: int) -> float:
        """The value at 0-based `index` of the values in sorted order (past `EXACT_LIMIT`, its
        bucket's middle)."""
        if not 0 <= index < self.count:
            raise IndexError(f"rank {index} of {self.count} values")
        if self._exact is not None:
            return float(np.partition(np.frombuffer(self._exact), index)[index])
        values_sorted, cumulative = self._sorted_buckets()
        value = values_sorted[np.searchsorted(cumulative, index + 1)]
        return float(min(max(value, self.min), self.max))

    def _sorted_buckets(self) -> tuple[np.ndarray, np.ndarray]:
        """Each bucket's middle, in order, and how many values lie at or below it."""
        if self._values:
            self._fold()
        values, counts = [], []
        for key, n in self._buckets.items():
            index, negative = divmod(key, 2)
            middle = math.exp((index + 0.5) * _LOG_RATIO)
            values.append(-middle if negative else middle)
            counts.append(n)
        if self._zeros:
            values.append(0.0)
            counts.append(self._zeros)
        order = np.argsort(values)
        return np.asarray(values)[order], np.cumsum(np.asarray(counts)[order])

    def _histogram_percentiles(self, points: tuple[float, ...]) -> list[float]:
        values_sorted, cumulative = self._sorted_buckets()
        out = []
        for p in points:
            rank = p / 100 * (self.count - 1)  # numpy's linear method, on bucket midpoints
            below = values_sorted[np.searchsorted(cumulative, math.floor(rank) + 1)]
            above = values_sorted[np.searchsorted(cumulative, math.ceil(rank) + 1)]
            value = below + (above - below) * (rank - math.floor(rank))
            out.append(float(min(max(value, self.min), self.max)))
        return out

    @property
    def std(self) -> float:
        moments = self._count_values()
        return math.sqrt(moments.m2 / moments.n) if moments.n else math.nan

    def stats(self) -> dict[str, float]:
        """AIPerf's statistics for one metric (population standard deviation)."""
        out = {"avg": self.sum / self.count if self.count else math.nan}
        out |= {f"p{p}": v for p, v in zip(catalog.PERCENTILES, self.percentiles(), strict=True)}
        out |= {"min": self.min, "max": self.max, "std": self.std, "count": self.count}
        out["sum"] = self.sum
        return out


class PhaseSummary:
    """Everything the exports say about a phase, fed one result at a time.

    A request is a success, the endpoint's failure (`errors`, the error rate's numerator) or
    cut short by the run itself (`cut`: counted apart, in neither). With `goodput` objectives
    ({metric: threshold}, in the metric's unit), a successful request is good when it has every
    metric named and each is within its objective.
    """

    def __init__(self, goodput: dict[str, float] | None = None) -> None:
        self.goodput = goodput or {}
        self.good = 0
        self.token_sources: Counter[str] = Counter()
        self.distributions: dict[str, Distribution] = {}
        self.ok = 0
        self.errors: Counter[ErrorInfo] = Counter()  # the endpoint's failures
        self.cut = 0  # requests the run cut short
        self.unseen = 0  # ... of which nothing was seen (lost with their worker)
        self.first_start_ns: int | None = None
        self.last_end_ns: int | None = None
        self._sinks: dict[str, array[float]] = {}  # metric -> its distribution's `sink`
        self._unsettled = 0  # results since the distributions' limits were checked

    def add(self, result: Result) -> None:
        if self.first_start_ns is None or result.start_ns < self.first_start_ns:
            self.first_start_ns = result.start_ns
        if self.last_end_ns is None or result.end_ns > self.last_end_ns:
            self.last_end_ns = result.end_ns
        if result.cut is not None:
            self.cut += 1
            self.unseen += result.cut.stamps_ms is None
        elif result.error is not None:
            error = result.error
            if error not in self.errors and len(self.errors) >= MAX_ERROR_KINDS:
                error = ErrorInfo(error.code, error.type, "(other messages)")
            self.errors[error] += 1
        else:
            self.ok += 1
            self.token_sources[result.token_source or "unknown"] += 1
            if self.goodput and self._is_good(result.metrics):
                self.good += 1
        sinks = self._sinks
        for name, value in result.metrics.items():
            sink = sinks.get(name)
            if sink is not None:  # some 30 values a result: straight into the arrays
                if type(value) is list:
                    sink.extend(value)
                else:
                    sink.append(value)
                continue
            distribution = self.distributions.get(name)
            if distribution is None:
                distribution = self.distributions[name] = Distribution()
            if isinstance(value, list):
                distribution.extend(value)
            else:
                distribution.add(value)
            sink = distribution.sink()
            if sink is not None:
                sinks[name] = sink
        self._unsettled += 1
        if self._unsettled >= SETTLE_EVERY:
            self._unsettled = 0
            for distribution in self.distributions.values():
                distribution.settle()

    def is_good(self, result: Result) -> bool:
        """No error, and within every objective."""
        return result.error is None and (not self.goodput or self._is_good(result.metrics))

    def _is_good(self, metrics: dict[str, Any]) -> bool:
        for name, threshold in self.goodput.items():
            value = metrics.get(name)
            if value is None:
                return False
            if value > threshold if catalog.OBJECTIVE_IS_CEILING[name] else value < threshold:
                return False
        return True

    @property
    def error_count(self) -> int:
        """The endpoint's failures (not what the run cut short)."""
        return sum(self.errors.values())

    def most_common_error(self) -> str | None:
        if not self.errors:
            return None
        ((error, _),) = self.errors.most_common(1)
        return describe_error(error.code, error.type, error.message)

    @property
    def duration_s(self) -> float:
        if self.first_start_ns is None or self.last_end_ns is None:
            return 0.0
        return (self.last_end_ns - self.first_start_ns) / 1e9

    def metric_stats(self) -> dict[str, dict[str, Any]]:
        """Per-request metrics: unit plus statistics, in catalog order."""
        return {
            name: {"unit": metric.unit, **self.distributions[name].stats()}
            for name, metric in catalog.RECORD.items()
            if name in self.distributions and self.distributions[name].count
        }

    def aggregates(self) -> dict[str, float]:
        duration = self.duration_s
        osl = self.distributions.get(catalog.OUTPUT_SEQUENCE_LENGTH.name)
        isl = self.distributions.get(catalog.INPUT_SEQUENCE_LENGTH.name)
        total_osl = osl.sum if osl else 0.0
        total = self.ok + self.error_count
        values = {
            catalog.REQUEST_THROUGHPUT.name: self.ok / duration if duration else 0.0,
            catalog.OUTPUT_TOKEN_THROUGHPUT.name: total_osl / duration if duration else 0.0,
            catalog.REQUEST_COUNT.name: float(self.ok),
            catalog.ERROR_REQUEST_COUNT.name: float(self.error_count),
            catalog.REQUEST_ERROR_RATE.name: 100.0 * self.error_count / total if total else 0.0,
            catalog.CUT_REQUEST_COUNT.name: float(self.cut),
            catalog.BENCHMARK_DURATION.name: duration,
            catalog.TOTAL_ISL.name: isl.sum if isl else 0.0,
            catalog.TOTAL_OSL.name: total_osl,
        }
        assert values.keys() == catalog.AGGREGATE.keys()
        if self.goodput:
            values[catalog.GOODPUT.name] = self.good / duration if duration else 0.0
            values[catalog.GOOD_REQUEST_COUNT.name] = float(self.good)
        return values

    def error_summary(self) -> list[dict[str, Any]]:
        return [
            {"error_details": {"code": e.code, "type": e.type, "message": e.message}, "count": n}
            for e, n in self.errors.most_common()
        ]
