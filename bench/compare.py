"""dagperf beside AIPerf (when installed): the same server, the same dataset, one run, one table.

    python bench/compare.py [--quick] [--aiperf PATH] [--million]

Figures, each measured identically for every tool (see bench/tools.py):

- ceiling: requests/s at concurrency 1, 16, 64, 256 against a zero-cost endpoint
  (bench/endpoint.py), whose own ceiling is measured first so it is known not to be the limit;
- CPU per request: user + system time of the tool's whole process tree per request served,
  between 10% and 90% of the run's requests (start-up is reported apart);
- launch to first request: from starting the command to the endpoint receiving a request;
- peak RSS of the process tree at concurrency 64;
- TTFT error: each request's reported TTFT minus the TTFT the simulator recorded itself writing,
  against a 20 ms server, at concurrency 1, 16, 64;
- FORK dispatch gap: from the server ending a parent's reply to it receiving a FORK child's
  request (server clock, so both tools are timed alike), for roots with one and four children;
- CPU while waiting: the tree's CPU share at concurrency 1 against a 200 ms server;
- how the ceiling moves with --workers 1, 2, 4 (dagperf only);
- scheduler routing throughput with many workers, in process (dagperf only);
- RSS growth over a long run against the zero-cost endpoint (dagperf only; 1,000,000 requests
  with --million, else 200,000): later peak minus the peak once warm.
"""

from __future__ import annotations

import argparse
import collections
import os
import tempfile
from pathlib import Path

import numpy as np

from dagperf.runtime import loops
from endpoint import Running, ceiling
from routing import routing_throughput
from tools import AIPerf, Dagperf, dataset, find_aiperf, run


class Table:
    def __init__(self, tools: list[str]):
        self.tools = tools
        self.rows: list[tuple[str, list[str], str]] = []

    def add(self, name: str, values: dict[str, str], ratio: str = "") -> None:
        self.rows.append((name, [values.get(t, "-") for t in self.tools], ratio))
        print(f"  {name}: " + ", ".join(f"{t} {v}" for t, v in values.items()), flush=True)

    def show(self) -> None:
        header = ["", *self.tools, "ratio" if len(self.tools) > 1 else ""]
        rows = [header] + [[n, *v, r] for n, v, r in self.rows]
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for row in rows:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def ratio(figures: dict[str, float | None], better: str) -> str:
    """How many times better the first tool's figure is than the second's (higher or lower is
    better); nothing when only one tool ran or a figure is missing."""
    if len(figures) < 2:
        return ""
    a, b = list(figures.values())[:2]
    if not a or not b:
        return ""
    return f"{a / b if better == 'higher' else b / a:.1f}x"


async def ceilings(tools, table, tmp, zero: Running, scale) -> None:
    flat = dataset(tmp / "flat.jsonl", 64)
    launch: dict[str, float] = {}
    for tool in tools:
        base = await run(
            tool,
            flat,
            zero,
            tmp / f"{tool.name}-base",
            "--concurrency",
            "1",
            "--request-count",
            "20",
        )
        launch[tool.name] = (zero.ask("/stats")["first_ns"] - base.launched_ns) / 1e9
    table.add(
        "launch to first request",
        {t: f"{v:.2f} s" for t, v in launch.items()},
        ratio(launch, "lower"),
    )
    rss: dict[str, float] = {}
    for concurrency in (1, 16, 64, 256):
        throughput, cpu = {}, {}
        for tool in tools:
            count = int((1500 if concurrency == 1 else 8000) * scale)
            if tool.name != "dagperf":
                count //= 2  # the same seconds' worth, roughly, of a slower tool
            result = await run(
                tool,
                flat,
                zero,
                tmp / f"{tool.name}-c{concurrency}",
                "--concurrency",
                str(concurrency),
                "--request-count",
                str(count),
                count_served=True,
            )
            throughput[tool.name] = result.throughput
            cpu[tool.name] = result.steady_cpu_ms
            if concurrency == 64:
                rss[tool.name] = result.peak_rss_mb
        table.add(
            f"ceiling, concurrency {concurrency}",
            {t: f"{v:,.0f} req/s" for t, v in throughput.items()},
            ratio(throughput, "higher"),
        )
        table.add(
            f"CPU per request, concurrency {concurrency}",
            {t: f"{v:.2f} ms" if v is not None else "?" for t, v in cpu.items()},
            ratio(cpu, "lower"),
        )
    table.add(
        "peak RSS (process tree), concurrency 64",
        {t: f"{v:.0f} MB" for t, v in rss.items()},
        ratio(rss, "lower"),
    )


async def ttft_accuracy(tools, table, tmp, timed: Running, scale) -> None:
    flat = dataset(tmp / "flat.jsonl", 64)
    for concurrency in (1, 16, 64):
        errors = {}
        for tool in tools:
            count = int((300 if concurrency == 1 else 1500) * scale)
            result = await run(
                tool,
                flat,
                timed,
                tmp / f"{tool.name}-ttft{concurrency}",
                "--concurrency",
                str(concurrency),
                "--request-count",
                str(count),
                sample=False,
            )
            served = {r["request_id"]: r for r in timed.ask("/records")}
            errors[tool.name] = np.percentile(
                [
                    r["metrics"]["time_to_first_token"]["value"]
                    - _server_ttft_ms(served[r["metadata"]["x_request_id"]])
                    for r in result.records
                    if r.get("error") is None
                ],
                [50, 99],
            )
        table.add(
            f"TTFT error, concurrency {concurrency} (20 ms server)",
            {t: f"p50 {p50:+.2f} ms, p99 {p99:+.2f} ms" for t, (p50, p99) in errors.items()},
        )


def _server_ttft_ms(record: dict) -> float:
    return (record["first_ns"] - record["received_ns"]) / 1e6


async def fork_gap(tools, table, tmp, timed: Running) -> None:
    """Server-side gaps for trees of one child and of four (whose children start one after
    another on the parent's worker)."""
    for forks in (1, 4):
        data = dataset(tmp / f"forks{forks}.jsonl", 200, forks=forks)
        every: dict[str, str] = {}
        for tool in tools:
            result = await run(
                tool,
                data,
                timed,
                tmp / f"{tool.name}-forks{forks}",
                "--concurrency",
                "1",
                "--num-conversations",
                "200",
                sample=False,
            )
            served = {r["request_id"]: r for r in timed.ask("/records")}
            by_tree: dict[str, dict[str, dict]] = collections.defaultdict(dict)
            for r in result.records:
                m = r["metadata"]
                by_tree[m["root_correlation_id"]][m["conversation_id"]] = served[m["x_request_id"]]
            gaps = [
                (child["received_ns"] - tree[name.split("-f")[0]]["end_ns"]) / 1e6
                for tree in by_tree.values()
                for name, child in tree.items()
                if "-f" in name
            ]
            every[tool.name] = (
                f"p50 {np.percentile(gaps, 50):.2f} ms, p99 {np.percentile(gaps, 99):.2f} ms"
            )
        table.add(f"FORK dispatch gap, {forks} child{'ren' if forks > 1 else ''} per parent", every)


async def idle(tools, table, tmp, slow: Running) -> None:
    """CPU spent waiting: one request at a time against a 200 ms server (a busy-wait shows)."""
    flat = dataset(tmp / "flat.jsonl", 64)
    share = {}
    for tool in tools:
        result = await run(
            tool,
            flat,
            slow,
            tmp / f"{tool.name}-idle",
            "--concurrency",
            "1",
            "--request-count",
            "40",
            count_served=True,
        )
        share[tool.name] = result.steady_cpu_share
    table.add(
        "CPU while waiting (concurrency 1, 200 ms server)",
        {t: f"{100 * v:.1f}% of a core" if v is not None else "?" for t, v in share.items()},
        ratio(share, "lower"),
    )


async def scaling(table, tmp, zero: Running, scale) -> None:
    """The ceiling with 1, 2 and 4 worker processes, and what the scheduler spends per request:
    its share is what bounds the worker count a cluster can usefully add."""
    flat = dataset(tmp / "flat.jsonl", 64)
    for workers in (1, 2, 4):
        result = await run(
            Dagperf(workers),
            flat,
            zero,
            tmp / f"workers{workers}",
            "--concurrency",
            "64",
            "--request-count",
            str(int(8000 * scale)),
            count_served=True,
        )
        root = result.steady_root_cpu_ms
        table.add(
            f"ceiling, concurrency 64, --workers {workers}",
            {
                "dagperf": f"{result.throughput:,.0f} req/s, scheduler "
                + (f"{root:.3f} ms CPU/request" if root is not None else "?")
            },
        )


async def long_run(table, tmp, zero: Running, requests: int) -> None:
    flat = dataset(tmp / "flat.jsonl", 64)
    result = await run(
        Dagperf(), flat, zero, tmp / "long", "--concurrency", "64", "--request-count", str(requests)
    )
    samples = result.samples_mb
    tenth = max(1, len(samples) // 10)
    warm, late = max(samples[tenth : 2 * tenth]), max(samples[-tenth:])
    table.add(
        f"RSS growth over {requests:,} requests",
        {
            "dagperf": f"{late - warm:+.0f} MB ({warm:.0f} -> {late:.0f} MB, "
            f"{result.throughput:,.0f} req/s)"
        },
    )


async def main(args: argparse.Namespace) -> None:
    scale = 0.25 if args.quick else 1.0
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        tools: list[Dagperf | AIPerf] = [Dagperf()]
        aiperf = find_aiperf(args.aiperf)
        if aiperf:
            (tmp / "aiperf").mkdir()
            tools.append(AIPerf(aiperf, tmp / "aiperf"))
        table = Table([t.name for t in tools])
        print(
            f"measuring on {os.cpu_count()} cores: {', '.join(table.tools)}"
            + ("" if aiperf else " (AIPerf not found: --aiperf PATH)"),
            flush=True,
        )
        zero, timed = Running.start(), Running.start(ttft_ms=20, itl_ms=2)
        slow = Running.start(ttft_ms=200, itl_ms=1)
        try:
            table.add("endpoint's own ceiling", {"dagperf": f"{ceiling(zero.url):,.0f} req/s"})
            await ceilings(tools, table, tmp, zero, scale)
            await ttft_accuracy(tools, table, tmp, timed, scale)
            await fork_gap(tools, table, tmp, timed)
            await idle(tools, table, tmp, slow)
            await scaling(table, tmp, zero, scale)
            for workers in (4, 64, 256):
                routed = routing_throughput(workers, int(200_000 * scale))
                table.add(
                    f"scheduler routing, {workers} workers (in process)",
                    {"dagperf": f"{routed:,.0f} req/s"},
                )
            requests = 1_000_000 if args.million else int(200_000 * scale)
            await long_run(table, tmp, zero, requests)
        finally:
            for endpoint in (zero, timed, slow):
                endpoint.stop()
    print()
    table.show()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a quarter of the requests")
    parser.add_argument("--aiperf", metavar="PATH", help="the aiperf command (default: found)")
    parser.add_argument("--million", action="store_true", help="the long run at 1,000,000")
    loops.run(main(parser.parse_args()))
