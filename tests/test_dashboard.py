"""The Grafana dashboard the chart ships (charts/dagperf/dashboards/dagperf.json), checked against
what the scheduler really exposes.

No Grafana server is installable here, so the tests play its part: they substitute the
dashboard's variables as Grafana would and send every panel's PromQL to a real Prometheus that
scraped a real run (FORK and SPAWN children, injected errors, two workers), and to promtool as
recording rules. A panel that would show "No data" for such a run, or an expression Prometheus
cannot parse, fails here instead of on a user's screen.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import subprocess
import time
from collections import defaultdict
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import aiohttp

from dagperf.metrics.live import LiveMetrics
from dagperf.simulator import SimConfig

from dagfile import conv, turn, user
from dashboard import Query, all_panels, load_dashboard, queries, shown_panels
from prom import PROMTOOL, SCRAPE_INTERVAL_S, api, scraping
from runs import Run, control_token, eventually, finish, gated_simulator, key_set, start_profile

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
BENCHMARK = "dash"
STEP_S = 1  # the range queries' step: Grafana's $__interval
# Grafana's $__rate_interval: max(4 scrape intervals, $__interval + 1 scrape interval).
RATE_INTERVAL = f"{max(4 * SCRAPE_INTERVAL_S, STEP_S + SCRAPE_INTERVAL_S)}s"
VARIABLES = {"benchmark": BENCHMARK, "__rate_interval": RATE_INTERVAL}
SELECTOR = re.compile(r"\b(dagperf_\w+)(\{[^}]*\})?")
RANGE = re.compile(r"\[([^\]]*)\]")
LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def test_the_dashboard_has_its_variables_and_every_panel_uses_them():
    dashboard = load_dashboard()
    identity = (dashboard["uid"], dashboard["title"], dashboard["tags"])
    assert identity == ("dagperf", "dagperf", ["dagperf"])
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    benchmark = variables["benchmark"]
    assert (benchmark["type"], benchmark["datasource"]) == ("query", DATASOURCE)
    assert benchmark["query"]["query"] == "label_values(dagperf_requests_total, benchmark)"
    assert benchmark["definition"] == benchmark["query"]["query"]
    ids = [p["id"] for p in all_panels(dashboard["panels"])]
    assert len(ids) == len(set(ids)), sorted(ids)
    panels = shown_panels(dashboard)
    titles = [p["title"] for p in panels]
    assert len(titles) == len(set(titles)), titles
    for panel in panels:
        title = panel["title"]
        assert panel["datasource"] == DATASOURCE, title
        assert panel["targets"], title
        assert all(t["datasource"] == DATASOURCE for t in panel["targets"]), title
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), title
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{title}: no unit"
        place = panel["gridPos"]
        assert place["x"] + place["w"] <= 24 and place["h"] > 0, title


def test_error_rate_panels_turn_orange_then_red():
    """The one threshold that means something whatever the server: a share of failures."""
    panels = shown_panels(load_dashboard())
    error_rates = [p for p in panels if p["title"].startswith("Error rate")]
    assert len(error_rates) == 2
    for panel in error_rates:
        defaults = panel["fieldConfig"]["defaults"]
        assert defaults["unit"] == "percentunit"
        steps = [(s["color"], s["value"]) for s in defaults["thresholds"]["steps"]]
        assert steps == [("green", None), ("orange", 0.01), ("red", 0.05)], panel["id"]


def test_every_expression_filters_on_the_benchmark_and_rates_over_the_rate_interval():
    """A selector without the benchmark mixes every run Prometheus holds into the panel; a fixed
    range breaks at other scrape intervals."""
    for query in queries(load_dashboard()):
        selectors = SELECTOR.findall(query.expr)
        assert selectors, query
        for name, matchers in selectors:
            assert re.search(r'\bbenchmark=~?"\$benchmark"', matchers), f"{query}: {name}"
        assert set(RANGE.findall(query.expr)) <= {"$__rate_interval"}, query


def test_the_dashboard_shows_every_metric_the_scheduler_exposes_and_only_those():
    """Names as prometheus_client exposes them: counters end in _total, histograms are read
    through their _bucket series. A metric added to the scheduler belongs on the dashboard."""
    exposed: set[str] = set()
    required: set[str] = set()
    for family in LiveMetrics(BENCHMARK).registry.collect():
        if family.type == "counter":
            names = [f"{family.name}_total"]
        elif family.type == "histogram":
            names = [f"{family.name}_{suffix}" for suffix in ("bucket", "count", "sum")]
        else:
            names = [family.name]
        exposed.update(names)
        required.add(names[0])
    used = {name for query in queries(load_dashboard()) for name, _ in SELECTOR.findall(query.expr)}
    assert sorted(used - exposed) == [], "not exposed by the scheduler"
    assert sorted(required - used) == [], "on no panel"


def test_every_expression_compiles_as_a_recording_rule(tmp_path):
    assert PROMTOOL, "needs promtool: apt-get install prometheus (tests/run.sh does)"
    rules = [
        {"record": f"dagperf_dashboard:panel_{q.panel_id}_{q.ref}", "expr": q.expand(VARIABLES)}
        for q in queries(load_dashboard())
    ]
    rules_file = tmp_path / "dashboard.rules.yml"  # JSON is YAML
    rules_file.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}, indent=2))
    checked = subprocess.run(
        [PROMTOOL, "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules)} rules found" in checked.stdout, checked.stdout


def dataset() -> list[dict[str, Any]]:
    """Roots that FORK two children each (sharing the root's long prompt, so the prefix cache has
    something to report), interleaved with parents that SPAWN two sub-agents and join them:
    agent depths 0 and 1 and every branch mode."""
    shared = user("the long context every FORK child inherits " * 8)
    lines = []
    for i in range(6):
        lines.append(conv(f"fork{i}", turn(messages=[shared], forks=[f"fork{i}a", f"fork{i}b"])))
        lines.append(conv(f"spawn{i}", turn(spawns=[f"agent{i}a", f"agent{i}b"]), turn()))
    for i in range(6):
        lines += [conv(f"fork{i}{k}", turn(), turn()) for k in "ab"]
        lines += [conv(f"agent{i}{k}") for k in "ab"]
    return lines


def own(metric: str) -> str:
    """A selector for this test's run."""
    return f'{metric}{{benchmark="{BENCHMARK}"}}'


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as response:
        return await response.json()


def values(data: dict[str, Any]) -> list[str]:
    """The sample values of an instant query's answer."""
    return [series["value"][1] for series in data["result"]]


async def panel_results(
    session: aiohttp.ClientSession, prometheus: str, since: float
) -> dict[Query, list[dict[str, Any]]]:
    """Every dashboard query over a range from `since` to now, as a time series panel asks.
    The steps count back from now, so that the last one sees the newest sample."""
    end = time.time()
    start = end - math.ceil((end - since) / STEP_S) * STEP_S
    span = {"start": str(start), "end": str(end), "step": f"{STEP_S}s"}
    results = {}
    for q in queries(load_dashboard()):
        data = await api(session, prometheus, "query_range", query=q.expand(VARIABLES), **span)
        results[q] = data["result"]
    return results


def lacking(query: Query, result: list[dict[str, Any]]) -> str | None:
    """What a panel would miss with this range result, if anything."""
    if not result:
        return "no data"
    if not any(math.isfinite(float(v)) for series in result for _, v in series["values"]):
        return "only NaN (a quantile or share over windows in which nothing happened)"
    for label in LEGEND_LABEL.findall(query.legend):
        for series in result:
            if label not in series["metric"]:
                return f"the legend shows {{{{{label}}}}} but a series has no such label"
    return None


def problems(results: dict[Query, list[dict[str, Any]]]) -> list[str]:
    return [f"{q}\n  -> {why}" for q, result in results.items() if (why := lacking(q, result))]


async def run_scraped(tmp_path: Path) -> tuple[dict[Query, list[dict[str, Any]]], Run]:
    """Run one benchmark while Prometheus scrapes it; returns every dashboard query's result
    over the run, once Prometheus holds the final values, and the run itself."""
    # About 350 ms a request, two trees at a time: the run spans several scrapes, so that rates
    # and quantiles see counters rise between two samples.
    config = SimConfig(ttft_ms=20, itl_ms=40, output_tokens=8, error_rate=0.2)
    async with scraping(tmp_path / "prometheus") as (prometheus, target):
        async with gated_simulator(config) as (sim, gate), aiohttp.ClientSession() as session:
            started = time.time()
            keys = key_set(tmp_path / "keys")
            process, directory = await start_profile(
                sim.url, tmp_path, dataset(), "--streaming", "--workers", "2", "--keys", str(keys),
                "--concurrency", "2", "--metrics-port", str(target),
                "--metrics-host", "127.0.0.1", "--metrics-linger", "60",
                "--benchmark-name", BENCHMARK,
                "--max-error-rate", "1",  # its errors are injected, for the error panels
            )  # fmt: skip
            scheduler = f"http://127.0.0.1:{target}"

            def query(promql: str) -> Awaitable[Any]:
                return api(session, prometheus, "query", query=promql)

            try:
                # Rates and quantiles need a sample from before the first reply: the branch
                # counters are exposed at zero from the start; the requests wait until then.
                await eventually(
                    lambda: query(own("dagperf_branch_children_spawned_total")), values
                )
                gate.open()
                status = await eventually(
                    lambda: get_json(session, f"{scheduler}/status"),
                    lambda status: status["state"] not in ("waiting for workers", "running"),
                )
                # Then a scrape after the end, so that Prometheus holds the final values.
                completed = float(status["progress"]["requestsCompleted"])
                await eventually(
                    lambda: query(own("dagperf_requests_completed")),
                    lambda data: [float(v) for v in values(data)] == [completed],
                )
                # Asked again while something lacks, up to a deadline; the test then shows what
                # still lacks.
                results = await panel_results(session, prometheus, started)
                deadline = time.monotonic() + 15
                while problems(results) and time.monotonic() < deadline:
                    await asyncio.sleep(0.5)
                    results = await panel_results(session, prometheus, started)
            finally:
                gate.open()
                with contextlib.suppress(aiohttp.ClientConnectionError):
                    stop = session.post(f"{scheduler}/stop", headers=control_token(keys))
                    await (await stop).release()  # ends the linger
                run = await finish(process, directory, sim)
    return results, run


async def test_every_panel_shows_data_for_a_real_run(tmp_path):
    results, run = await run_scraped(tmp_path)
    assert run.returncode == 0, run.stderr
    missing = problems(results)
    assert not missing, "panels without data:\n" + "\n".join(missing)
    # The run had what the panels are for: both depths, every branch mode, both workers'
    # shares, and errors by type.
    seen = defaultdict(set)
    for result in results.values():
        for series in result:
            for label, value in series["metric"].items():
                seen[label].add(value)
    assert {"0", "1"} <= seen["agent_depth"]
    assert {"root", "fork", "spawn"} <= seen["branch_mode"]
    assert {"ok", "error"} <= seen["outcome"]
    assert len(seen["worker"]) == 2
    assert seen["error_type"]
    # Each BranchStats legend names its counter: the last values are the run's own.
    shown = {
        q.legend.replace(" ", "_"): int(float(result[0]["values"][-1][1]))
        for q, result in results.items()
        if q.panel == "BranchStats totals"
    }
    assert shown == run.branch_stats
