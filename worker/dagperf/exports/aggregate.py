"""`aggregate/profile_export_aiperf_aggregate.json` and `.csv`: the same run, repeated, summed up.

With `--num-profile-runs N`, each figure of a run's summary (every statistic of every metric,
and every aggregate) becomes a sample of N; for each the aggregate gives the mean, the sample
standard deviation, min and max, the coefficient of variation, the standard error and a
confidence interval for the mean from Student's t distribution (n - 1 degrees of freedom). A
central figure (a mean, a percentile, an aggregate; not a spread or an extreme, which vary by
nature) whose coefficient of variation passes `UNSTABLE_CV` is flagged `unstable`: its runs
disagree too much for one run's value, or the mean, to be trusted without more runs.

The layout and names are AIPerf's, so tools that read its multi-run output read these.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from dagperf.exports.files import whole_or_nothing
from dagperf.vocabulary import catalog

UNSTABLE_CV = 0.10
SPREADS = ("_std", "_min", "_max")  # figures not judged for stability
STATS = ("avg", "min", "max", "std", "p50", "p90", "p95", "p99")
_STEPS = 4096  # Simpson intervals over the t density: quantiles good to well under 1e-6


def t_critical(confidence: float, df: int) -> float:
    """The two-sided critical value of Student's t with `df` degrees of freedom."""
    if not 0 < confidence < 1 or df < 1:
        raise ValueError(f"need 0 < confidence < 1 and df >= 1, got {confidence}, {df}")
    target = 0.5 + confidence / 2
    low, high = 0.0, 1.0
    while _t_cdf(high, df) < target:
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if _t_cdf(middle, df) < target else (low, middle)
    return (low + high) / 2


def _t_cdf(t: float, df: int) -> float:
    """P(T <= t) for t >= 0, by Simpson's rule over the density."""
    scale = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    h = t / _STEPS
    total = 0.0
    for i in range(_STEPS + 1):
        weight = 1 if i in (0, _STEPS) else 4 if i % 2 else 2
        total += weight * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2)
    return 0.5 + scale * total * h / 3


def figures(document: dict[str, Any]) -> dict[str, tuple[float, str]]:
    """Every figure of a run's summary worth comparing across runs, as (value, unit)."""
    out: dict[str, tuple[float, str]] = {}
    for name in (*catalog.RECORD, catalog.SESSION_DURATION.name):
        stats = document.get(name)
        if stats:
            for stat in STATS:
                value = stats.get(stat)
                if isinstance(value, int | float) and math.isfinite(value):
                    out[f"{name}_{stat}"] = (float(value), stats["unit"])
    for name in catalog.SCALARS:
        scalar = document.get(name)
        if scalar and isinstance(scalar.get("avg"), int | float):
            out[f"{name}_avg"] = (float(scalar["avg"]), scalar["unit"])
    return out


def aggregate(
    documents: list[dict[str, Any]],
    labels: list[str],
    failed: list[dict[str, str]],
    confidence: float,
) -> dict[str, Any]:
    """The aggregate over the runs that finished (at least two)."""
    if len(documents) < 2:
        raise ValueError(f"{len(documents)} run(s) finished; a confidence interval needs 2")
    n = len(documents)
    t = t_critical(confidence, n - 1)
    per_run = [figures(d) for d in documents]
    names = [name for name in per_run[0] if all(name in run for run in per_run)]
    metrics = {}
    for name in names:
        values = [run[name][0] for run in per_run]
        mean = sum(values) / n
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        se = std / math.sqrt(n)
        cv = std / abs(mean) if mean else (0.0 if std == 0 else math.inf)
        metrics[name] = {
            "mean": mean,
            "std": std,
            "min": min(values),
            "max": max(values),
            "cv": cv,
            "se": se,
            "ci_low": mean - t * se,
            "ci_high": mean + t * se,
            "t_critical": t,
            "unit": per_run[0][name][1],
            "unstable": cv > UNSTABLE_CV and not name.endswith(SPREADS),
        }
    return {
        "metadata": {
            "aggregation_type": "confidence",
            "num_profile_runs": n + len(failed),
            "num_successful_runs": n,
            "confidence_level": confidence,
            "run_labels": labels,
            "failed_runs": failed,
            "unstable_cv": UNSTABLE_CV,
        },
        "metrics": metrics,
    }


def write_aggregate(directory: Path, result: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with whole_or_nothing(directory / "profile_export_aiperf_aggregate.json") as f:
        f.write(json.dumps(result, indent=2) + "\n")
    columns = ("mean", "std", "min", "max", "cv", "se", "ci_low", "ci_high")
    with whole_or_nothing(directory / "profile_export_aiperf_aggregate.csv", newline="") as f:
        out = csv.writer(f)
        out.writerow(["Metric", "Unit", *columns, "Unstable"])
        for name, m in result["metrics"].items():
            out.writerow([name, m["unit"], *(f"{m[c]:.4f}" for c in columns), m["unstable"]])


def render(result: dict[str, Any], headline: tuple[str, ...]) -> str:
    """A few lines for the console: the headline figures with their intervals, and which
    figures are unstable."""
    meta, metrics = result["metadata"], result["metrics"]
    level = f"{100 * meta['confidence_level']:g}%"
    lines = ["", f"dagperf | {meta['num_successful_runs']} runs, mean and {level} interval"]
    for name in headline:
        figure = metrics.get(name)
        if figure:
            flag = "  (unstable)" if figure["unstable"] else ""
            interval = f"[{figure['ci_low']:,.2f}, {figure['ci_high']:,.2f}]"
            lines.append(
                f"  {name} ({figure['unit']}): {figure['mean']:,.2f} {interval}, "
                f"cv {figure['cv']:.1%}{flag}"
            )
    unstable = [name for name, m in metrics.items() if m["unstable"]]
    if unstable:
        lines.append(f"Unstable (cv over {UNSTABLE_CV:.0%}): {', '.join(unstable)}")
    for failure in meta["failed_runs"]:
        lines.append(f"Run {failure['label']} failed: {failure['error']}")
    return "\n".join(lines) + "\n"


HEADLINE = tuple(
    f"{metric.name}_{stat}"
    for metric, stat in (
        (catalog.REQUEST_THROUGHPUT, "avg"),
        (catalog.TIME_TO_FIRST_TOKEN, "p50"),
        (catalog.TIME_TO_FIRST_TOKEN, "p99"),
        (catalog.INTER_TOKEN_LATENCY, "p50"),
        (catalog.REQUEST_LATENCY, "p99"),
        (catalog.SESSION_DURATION, "p90"),
        (catalog.SESSION_GOODPUT, "avg"),
    )
)
