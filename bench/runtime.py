"""dagperf's runtime, measured: ceilings, CPU per request, start-up, memory, dispatch gap.

    python bench/runtime.py [--quick]

Each figure comes from real `dagperf profile` runs (driver, worker processes, ZeroMQ) against
the built-in simulator, which runs in this process so it is neither counted in dagperf's CPU
and memory nor starved by it more than a real server on the same machine would be:

- ceiling: requests/s at concurrency 1, 16, 64, 256 against a zero-delay streaming server;
- CPU ms per request: user + system time of the whole dagperf process tree, per request;
- launch to first request: from starting `dagperf profile` to the server receiving a request;
- peak RSS: the largest sum of resident memory over the dagperf process tree, sampled;
- FORK dispatch gap: from a parent's response ending to its FORK children's requests starting;
- TTFT error: reported TTFT minus the server's own record of it, with a 20 ms server;
- idle CPU: dagperf's CPU share while it waits on a slow server at concurrency 1 (no busy-wait),
  as the extra CPU of a long run over a one-request run, per extra second.
The server's own ceiling is measured first, with a separate client process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dagperf.simulator import SimConfig, running_simulator

ZERO = SimConfig(ttft_ms=0, itl_ms=0, prefill_ms_per_token=0, output_tokens=16, record_limit=0)


def dataset(path: Path, roots: int, forks: int = 0) -> Path:
    with path.open("w") as f:
        for r in range(roots):
            kids = [f"r{r}-f{k}" for k in range(forks)]
            turn = {"messages": [{"role": "user", "content": f"question {r}"}], "max_tokens": 16}
            if kids:
                turn["forks"] = kids
            f.write(json.dumps({"session_id": f"r{r}", "turns": [turn]}) + "\n")
            for kid in kids:
                child = {"messages": [{"role": "user", "content": "go on"}]}
                f.write(json.dumps({"session_id": kid, "turns": [child]}) + "\n")
    return path


def tree_rss_kb(root: int) -> int:
    """Resident memory of a process and all its descendants."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            status = (entry / "status").read_text()
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
        rss[pid] = next(
            (int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0
        )
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return sum(rss.get(pid, 0) for pid in tree)


async def profile_run(url: str, data: Path, out: Path, *flags: str) -> dict:
    """One `dagperf profile` run: its summary plus CPU, peak RSS and start-up figures."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    launched = time.time_ns()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "dagperf",
        "profile",
        "--input-file",
        str(data),
        "--url",
        url,
        "--model",
        "m",
        "--artifact-dir",
        str(out),
        "--quiet",
        *flags,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    peak = 0
    waiter = asyncio.ensure_future(process.wait())
    while not waiter.done():
        peak = max(peak, tree_rss_kb(process.pid))
        await asyncio.wait([waiter], timeout=0.05)
    stderr = (await process.stderr.read()).decode()
    if process.returncode != 0:
        raise SystemExit(f"dagperf profile failed:\n{stderr}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summary = json.loads((out / "profile_export_aiperf.json").read_text())
    records = [json.loads(line) for line in (out / "profile_export.jsonl").read_text().splitlines()]
    first = min(r["metadata"]["request_start_ns"] for r in records)
    return {
        "summary": summary,
        "records": records,
        "cpu_s": cpu_s,
        "peak_rss_mb": peak / 1024,
        "launch_to_first_s": (first - launched) / 1e9,
    }


async def server_ceiling(url: str, seconds: float) -> float:
    """The simulator's own requests/s, driven by a client in another process."""
    client = f"""
import asyncio, aiohttp, time
async def main():
    body = {{"model": "m", "messages": [{{"role": "user", "content": "hi"}}], "stream": True}}
    done = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        end = time.perf_counter() + {seconds}
        async def loop():
            nonlocal done
            while time.perf_counter() < end:
                async with s.post("{url}/v1/chat/completions", json=body) as r:
                    await r.read()
                done += 1
        await asyncio.gather(*[loop() for _ in range(64)])
    print(done / {seconds})
asyncio.run(main())
"""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", client, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await process.communicate()
    return float(out)


async def main(quick: bool) -> None:
    scale = 0.25 if quick else 1.0
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        async with running_simulator(ZERO) as sim:
            rows.append(
                (
                    "server ceiling (other process, 64 streams)",
                    f"{await server_ceiling(sim.url, 3 * scale):,.0f} req/s",
                )
            )
            flat = dataset(tmp / "flat.jsonl", 64)
            cpu_per_request = []
            for concurrency in (1, 16, 64, 256):
                count = int((1500 if concurrency == 1 else 6000) * scale)
                result = await profile_run(
                    sim.url,
                    flat,
                    tmp / f"c{concurrency}",
                    "--streaming",
                    "--concurrency",
                    str(concurrency),
                    "--request-count",
                    str(count),
                    "--workers",
                    "2",
                )
                throughput = result["summary"]["request_throughput"]["avg"]
                cpu_ms = 1000 * result["cpu_s"] / count
                cpu_per_request.append(cpu_ms)
                rows.append((f"ceiling, concurrency {concurrency}", f"{throughput:,.0f} req/s"))
                rows.append(
                    (
                        f"CPU per request, concurrency {concurrency}",
                        f"{cpu_ms:.2f} ms (all dagperf processes)",
                    )
                )
                if concurrency == 64:
                    rows.append(("launch to first request", f"{result['launch_to_first_s']:.2f} s"))
                    rows.append(("peak RSS, 2 workers", f"{result['peak_rss_mb']:.0f} MB"))

            forking = dataset(tmp / "forks.jsonl", 200, forks=4)
            result = await profile_run(
                sim.url,
                forking,
                tmp / "forks",
                "--streaming",
                "--concurrency",
                "8",
                "--workers",
                "2",
            )
            by_id = {r["metadata"]["x_request_id"]: r["metadata"] for r in result["records"]}
            gaps = [
                (r["metadata"]["request_start_ns"] - by_id[dep]["request_end_ns"]) / 1e6
                for r in result["records"]
                if r["metadata"]["branch_mode"] == "fork"
                for dep in r["metadata"]["depends_on"]
            ]
            p50, p99 = np.percentile(gaps, [50, 99])
            rows.append(
                ("FORK dispatch gap", f"p50 {p50:.2f} ms, p99 {p99:.2f} ms ({len(gaps)} children)")
            )

        # Accuracy: each request's reported TTFT minus the TTFT the server itself recorded
        # (from its handler starting to its first chunk written), against a 20 ms server.
        timed = SimConfig(ttft_ms=20, itl_ms=2, prefill_ms_per_token=0, output_tokens=16)
        for concurrency in (1, 16, 64):
            async with running_simulator(timed) as sim:
                count = int((300 if concurrency == 1 else 1500) * scale)
                result = await profile_run(
                    sim.url, flat, tmp / f"accuracy{concurrency}", "--streaming",
                    "--concurrency", str(concurrency), "--request-count", str(count),
                    "--workers", "2",
                )  # fmt: skip
                served = {r.request_id: r for r in sim.simulator.records}
            errors = [
                r["metrics"]["time_to_first_token"]["value"]
                - (served[r["metadata"]["x_request_id"]].first_chunk_ns
                   - served[r["metadata"]["x_request_id"]].received_ns) / 1e6
                for r in result["records"]
            ]  # fmt: skip
            p50, p99 = np.percentile(errors, [50, 99])
            rows.append((f"TTFT error vs server, concurrency {concurrency} (20 ms server)",
                         f"p50 {p50:+.2f} ms, p99 {p99:+.2f} ms"))  # fmt: skip

        # Idle: the CPU a long wait on a slow server costs beyond a one-request run, per
        # second of the extra wall time, so start-up and teardown cancel out.
        slow = SimConfig(ttft_ms=200, itl_ms=0, output_tokens=4, record_limit=0)
        async with running_simulator(slow) as sim:
            timed = []
            for count in (1, max(5, int(20 * scale))):
                start = time.perf_counter()
                result = await profile_run(
                    sim.url,
                    flat,
                    tmp / f"idle{count}",
                    "--concurrency",
                    "1",
                    "--request-count",
                    str(count),
                )
                timed.append((time.perf_counter() - start, result["cpu_s"]))
            (wall_1, cpu_1), (wall_n, cpu_n) = timed
            rows.append(
                (
                    "idle CPU at concurrency 1 (200 ms server)",
                    f"{100 * (cpu_n - cpu_1) / (wall_n - wall_1):.1f}% of one core",
                )
            )

    width = max(len(name) for name, _ in rows)
    print(f"dagperf runtime benchmark ({os.cpu_count()} cores)")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a quarter of the requests")
    asyncio.run(main(parser.parse_args().quick))
