"""How dagperf scales: start-up and memory with the dataset's size, and the scheduler's ceiling.

    python bench/scale.py [--large] [--fork-heavy] [--skip-startup] [--skip-ceiling]

Figures (docs/scale.md holds the last ones):

- start-up: a FORK-tree dataset (each root a 1.3 KB prompt and two FORK children: three
  conversations per tree) of 30,000 and 300,000 conversations, and with --large 1,000,000
  (552 MB, the size the issue's targets name), and with --fork-heavy 1,200,000 whose roots ask
  1.0 KB (527 MB: more, shorter lines for about the same size); 2,000 requests against the
  zero-cost endpoint: launch to the first request, and in a second run (sampling memory takes
  CPU) the process tree's peak RSS and its ratio to the file's size;
  `dagperf validate` of the same file, time and peak RSS;
- the scheduler's ceiling: requests/s with 1, 4 and 16 worker processes at concurrency 256
  against the zero-cost endpoint, with the scheduler process's own CPU per request in the
  steady state, and what one core would route at that cost;
- sharding, simulated: the in-process routing loop (bench/routing.py) over 256 roots in one
  process, against the same roots split over two processes running at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from endpoint import Running
from routing import routing_throughput
from tools import Dagperf, run

SENTENCE = "Review this change and list every risk you see. "
PROMPT = SENTENCE * 27  # about 1.3 KB
SHORT_PROMPT = SENTENCE * 20  # about 1.0 KB


def fork_trees(path: Path, conversations: int, prompt: str = PROMPT) -> Path:
    with path.open("w") as f:
        for t in range(conversations // 3):
            kids = [f"t{t}-a", f"t{t}-b"]
            root = {"messages": [{"role": "user", "content": f"{t} {prompt}"}], "forks": kids}
            f.write(json.dumps({"session_id": f"t{t}", "turns": [root]}) + "\n")
            for kid in kids:
                turn = {"messages": [{"role": "user", "content": "and then?"}], "max_tokens": 16}
                f.write(json.dumps({"session_id": kid, "turns": [turn]}) + "\n")
        # On disk before it is timed, as a user's dataset is: a file just written is still
        # being flushed, and that takes CPU from the run (0.7 s of 5 at 551 MB).
        f.flush()
        os.fsync(f.fileno())
    return path


VALIDATE = (
    "import resource, sys; from dagperf.cli import main; code = main(['validate', sys.argv[1]]); "
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
)


def validate(path: Path) -> tuple[float, float]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", VALIDATE, str(path)], check=True, capture_output=True, text=True
    )
    return time.perf_counter() - started, int(done.stdout.split()[-1]) / 1024


async def startup(sizes: list[tuple[int, str]], tmp: Path, zero: Running) -> None:
    print(f"{'conversations':>14} {'file MB':>8} {'first request s':>16} {'peak RSS MB':>12} "
          f"{'RSS/file':>9} {'validate s':>11} {'validate MB':>12}")  # fmt: skip
    for n, prompt in sizes:
        data = fork_trees(tmp / f"trees-{n}.dag.jsonl", n, prompt)
        size_mb = data.stat().st_size / 1e6
        load = ("--concurrency", "64", "--request-count", "2000")
        # Timed apart from the run whose memory is sampled: reading /proc every 50 ms takes
        # CPU the start-up would otherwise have (a tenth of a second or more at 551 MB).
        timed = await run(Dagperf(workers=2), data, zero, tmp / f"timed-{n}", *load, sample=False)
        launch_s = timed.first_request_s
        result = await run(Dagperf(workers=2), data, zero, tmp / f"startup-{n}", *load)
        check_s, check_mb = validate(data)
        print(f"{n:>14,} {size_mb:>8.0f} {launch_s:>16.1f} {result.peak_rss_mb:>12,.0f} "
              f"{result.peak_rss_mb / size_mb:>9.1f} {check_s:>11.1f} {check_mb:>12,.0f}",
              flush=True)  # fmt: skip
        data.unlink()


async def ceiling(tmp: Path, zero: Running) -> None:
    data = fork_trees(tmp / "ceiling.dag.jsonl", 3000)
    print(f"{'workers':>8} {'req/s':>8} {'scheduler CPU/req':>18} {'one core at that cost':>22}")
    for workers in (1, 4, 16):
        result = await run(Dagperf(workers=workers), data, zero, tmp / f"ceiling-{workers}",
                           "--concurrency", "256", "--request-count", "60000",
                           count_served=True)  # fmt: skip
        root_ms = result.steady_root_cpu_ms
        core = f"{1000 / root_ms:,.0f} req/s" if root_ms else "-"
        shown = f"{root_ms:.3f} ms" if root_ms else "-"
        print(f"{workers:>8} {result.throughput:>8,.0f} {shown:>18} {core:>22}", flush=True)


def _shard(requests: int, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    results.put(routing_throughput(4, requests, roots=128))


def sharding() -> None:
    one = routing_throughput(4, 200_000, roots=256)
    results: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    shards = [multiprocessing.Process(target=_shard, args=(100_000, results)) for _ in range(2)]
    for p in shards:
        p.start()
    both = [results.get() for _ in shards]
    for p in shards:
        p.join()
    print(f"routing, one scheduler, 256 roots:           {one:>9,.0f} req/s")
    print(f"routing, two shards of 128 roots at once:    {sum(both):>9,.0f} req/s "
          f"({' + '.join(f'{b:,.0f}' for b in both)}; {os.cpu_count()} cores)")  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--large", action="store_true", help="add 1,000,000 conversations (552 MB)")
    parser.add_argument(
        "--fork-heavy", action="store_true", help="add 1,200,000 conversations, 1 KB roots (527 MB)"
    )
    parser.add_argument("--skip-startup", action="store_true")
    parser.add_argument("--skip-ceiling", action="store_true")
    args = parser.parse_args()
    zero = Running.start()
    try:
        with tempfile.TemporaryDirectory() as name:
            tmp = Path(name)
            if not args.skip_startup:
                sizes = [(30_000, PROMPT), (300_000, PROMPT)]
                sizes += [(1_000_000, PROMPT)] if args.large else []
                sizes += [(1_200_000, SHORT_PROMPT)] if args.fork_heavy else []
                await startup(sizes, tmp, zero)
            if not args.skip_ceiling:
                await ceiling(tmp, zero)
        sharding()
    finally:
        zero.stop()


if __name__ == "__main__":
    asyncio.run(main())
