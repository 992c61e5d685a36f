"""Every dashboard panel computes what its title says: each query is evaluated by Prometheus's
own engine (`promtool test rules`) over series whose values are known, and must give the number
worked out here by hand. Changing a percentile, a numerator or a label a panel groups by fails.

The series belong to benchmark "mine"; a second benchmark with other values shares the server,
so a query that ignores the benchmark variable gives the wrong number too. Counters grow by a
fixed amount a minute, so every rate over the 5-minute window is exact; histogram buckets grow
likewise, so each quantile follows from linear interpolation inside one bucket.
"""

from __future__ import annotations

import json
import math
import subprocess

from dagperf.metrics.live import histogram_name
from dagperf.vocabulary import catalog

from dashboard import load_dashboard, queries
from prom import PROMTOOL

VARIABLES = {"benchmark": "mine", "__rate_interval": "5m"}
MINUTES = 10  # of input series; queries are evaluated at the last minute
# Results are compared after rounding to a power of two (exact in binary floating point on both
# sides), so 0.44 computed two ways is one number; 2^-20 still tells 0.099 from 0.1.
GRAIN = 2**-20


def grained(value: float) -> float:
    return math.floor(value / GRAIN + 0.5) * GRAIN


def counter(per_minute: float) -> str:
    return f"0+{per_minute}x{MINUTES}"


def gauge(value: float) -> str:
    return f"{value}x{MINUTES}"


def histogram(name: str, labels: str, buckets: dict[str, float]) -> dict[str, str]:
    """Cumulative bucket counts added each minute."""
    return {f'{name}_bucket{{{labels},le="{le}"}}': counter(n) for le, n in buckets.items()}


def series(benchmark: str, scale: float) -> dict[str, str]:
    """One benchmark's series; `scale` 1 is the one the expectations below are worked out for."""
    b = f'benchmark="{benchmark}"'
    out = {
        f"dagperf_progress_ratio{{{b}}}": gauge(0.25 * scale),
        f"dagperf_requests_completed{{{b}}}": gauge(40 * scale),
        f"dagperf_requests_expected{{{b}}}": gauge(160 * scale),
        f'dagperf_requests_in_flight{{{b},pod="p1"}}': gauge(2 * scale),
        f'dagperf_requests_in_flight{{{b},pod="p2"}}': gauge(1 * scale),
        f"dagperf_live_workers{{{b}}}": gauge(2 * scale),
        # 1.5 ok and 0.1 failed requests a second; worker w1 sent 1.1 of them, w2 0.5
        f'dagperf_requests_total{{{b},outcome="ok",worker="w1"}}': counter(60 * scale),
        f'dagperf_requests_total{{{b},outcome="ok",worker="w2"}}': counter(30 * scale),
        f'dagperf_requests_total{{{b},outcome="error",worker="w1"}}': counter(6 * scale),
        f'dagperf_request_errors_total{{{b},error_type="Timeout"}}': counter(3 * scale),
        f'dagperf_request_errors_total{{{b},error_type="HTTP 500"}}': counter(3 * scale),
        f"dagperf_input_tokens_total{{{b}}}": counter(6000 * scale),
        f"dagperf_cached_prompt_tokens_total{{{b}}}": counter(1500),
        f"dagperf_output_tokens_total{{{b}}}": counter(1200 * scale),
    }
    for n, name in enumerate(
        ("children_spawned", "children_completed", "children_errored", "children_truncated",
         "parents_suspended", "parents_resumed", "parents_failed_due_to_child_error",
         "joins_suppressed"), start=1,
    ):  # fmt: skip
        out[f"dagperf_branch_{name}_total{{{b}}}"] = counter(6 * n * scale)
    ttft = histogram_name(catalog.TIME_TO_FIRST_TOKEN)
    # roots: half within 0.1 s, 90% within 0.2 s, all within 0.5 s; FORK children all within 0.1 s
    roots = {"0.1": 50, "0.2": 90, "0.5": 100, "+Inf": 100}
    out |= histogram(ttft, f'{b},branch_mode="root"', roots)
    forks = {le: 100 * scale for le in ("0.1", "0.2", "0.5", "+Inf")}
    out |= histogram(ttft, f'{b},branch_mode="fork"', forks)
    itl = {"0.01": 10, "0.02": 20, "0.05": 40, "+Inf": 40 * scale}
    out |= histogram(histogram_name(catalog.INTER_TOKEN_LATENCY), b, itl)
    latency = histogram_name(catalog.REQUEST_LATENCY)
    out |= histogram(latency, f'{b},agent_depth="0"', {"1": 10, "2": 20, "5": 20, "+Inf": 20})
    out |= histogram(latency, f'{b},agent_depth="1"', {"1": 20, "2": 20, "5": 20, "+Inf": 20})
    return out


# (panel, target) -> {labels of each resulting series: value}, worked out from `series` above.
EXPECTED: dict[tuple[str, str], dict[str, float]] = {
    ("Progress", "A"): {"{}": 0.25},
    ("Requests completed / expected", "A"): {"{}": 40},
    ("Requests completed / expected", "B"): {"{}": 160},
    ("Requests in flight", "A"): {"{}": 3},
    ("Live workers", "A"): {"{}": 2},
    ("Error rate", "A"): {"{}": 0.1 / 1.6},
    ("Request throughput by outcome", "A"): {'{outcome="ok"}': 1.5, '{outcome="error"}': 0.1},
    ("Requests in flight and live workers", "A"): {"{}": 3},
    ("Requests in flight and live workers", "B"): {"{}": 2},
    # all TTFTs: 150 of 200 within 0.1 s, 190 within 0.2 s
    ("Time to first token", "A"): {"{}": 0.1 * 100 / 150},
    ("Time to first token", "B"): {"{}": 0.1 + 0.1 * 30 / 40},
    ("Time to first token", "C"): {"{}": 0.2 + 0.3 * 8 / 10},
    ("Inter-token latency", "A"): {"{}": 0.02},
    ("Inter-token latency", "B"): {"{}": 0.02 + 0.03 * 16 / 20},
    ("Inter-token latency", "C"): {"{}": 0.02 + 0.03 * 19.6 / 20},
    # all latencies: 30 of 40 within 1 s, 40 within 2 s
    ("Request latency", "A"): {"{}": 20 / 30},
    ("Request latency", "B"): {"{}": 1 + 6 / 10},
    ("Request latency", "C"): {"{}": 1 + 9.6 / 10},
    ("Request latency by agent depth", "A"): {
        '{agent_depth="0"}': 1.0,
        '{agent_depth="1"}': 0.5,
    },
    ("Request latency by agent depth", "B"): {
        '{agent_depth="0"}': 1 + 9.8 / 10,
        '{agent_depth="1"}': 0.99,
    },
    ("Time to first token by branch mode", "A"): {
        '{branch_mode="root"}': 0.1,
        '{branch_mode="fork"}': 0.05,
    },
    ("Time to first token by branch mode", "B"): {
        '{branch_mode="root"}': 0.2 + 0.3 * 9 / 10,
        '{branch_mode="fork"}': 0.099,
    },
    ("Errors by type", "A"): {'{error_type="Timeout"}': 0.05, '{error_type="HTTP 500"}': 0.05},
    ("Error rate over time", "A"): {"{}": 0.1 / 1.6},
    ("Request share per worker", "A"): {'{worker="w1"}': 1.1 / 1.6, '{worker="w2"}': 0.5 / 1.6},
    ("Request share per worker, whole run", "A"): {
        '{worker="w1"}': 660 / 960,
        '{worker="w2"}': 300 / 960,
    },
    ("Token throughput", "A"): {"{}": 100},
    ("Token throughput", "B"): {"{}": 25},
    ("Token throughput", "C"): {"{}": 20},
    ("Cached prompt token share", "A"): {"{}": 0.25},
    **{
        ("BranchStats totals", ref): {"{}": 6 * n * MINUTES}
        for n, ref in enumerate("ABCDEFGH", start=1)
    },
    **{("Branch activity", ref): {"{}": 6 * n / 60} for n, ref in enumerate("ABCDEF", start=1)},
}


def test_every_panel_computes_what_its_title_says(tmp_path):
    assert PROMTOOL, "needs promtool: apt-get install prometheus (tests/run.sh does)"
    panel_queries = queries(load_dashboard())
    assert {(q.panel, q.ref) for q in panel_queries} == set(EXPECTED), "every target, no other"
    inputs = series("mine", 1) | series("theirs", 3)
    tests = [
        {
            "expr": f"round({q.expand(VARIABLES)}, {GRAIN!r})",
            "eval_time": f"{MINUTES}m",
            "exp_samples": [
                {"labels": labels, "value": grained(value)}
                for labels, value in EXPECTED[(q.panel, q.ref)].items()
            ],
        }
        for q in panel_queries
    ]
    spec = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in inputs.items()],
            "promql_expr_test": tests,
        }],
    }  # fmt: skip
    file = tmp_path / "dashboard.test.yml"  # JSON is YAML
    file.write_text(json.dumps(spec, indent=1))
    done = subprocess.run(
        [PROMTOOL, "test", "rules", str(file)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
