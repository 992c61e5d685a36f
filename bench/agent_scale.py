"""Start-up and memory on a directory of coding-agent traces, beside a dag_jsonl file of the
same size.

    python bench/agent_scale.py [--sessions 1000] [--rounds 3]

The traces come from bench/agent_traces.py (synthetic, seeded); the dag_jsonl file is
bench/scale.py's FORK trees, as many as fill the same number of bytes. Each input runs 2,000
requests against the zero-cost endpoint (bench/endpoint.py) at concurrency 64, in turns, `--rounds`
times: launch to the first request (the run's own record of it, in a run whose memory is not
sampled), then the process tree's peak RSS in a second run; and `dagperf validate`'s time and
peak RSS. A trace directory is read the way the dag_jsonl loader reads a file: what a run must
know up front, then each tree when the run reaches it; the medians are printed side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from endpoint import Running
from scale import PROMPT, fork_trees, validate
from tools import Dagperf, run

HERE = Path(__file__).resolve().parent
LOAD = ("--concurrency", "64", "--request-count", "2000")


def traces(out: Path, sessions: int) -> Path:
    subprocess.run(
        [sys.executable, str(HERE / "agent_traces.py"), str(out), "--sessions", str(sessions)],
        check=True,
        capture_output=True,
    )
    return out


def same_size(path: Path, size: int) -> Path:
    """FORK trees (scale.py's) filling about `size` bytes."""
    probe = fork_trees(path, 3000, PROMPT)
    per_conversation = probe.stat().st_size / 3000
    return fork_trees(path, int(size / per_conversation) // 3 * 3, PROMPT)


async def measure(data: Path, kind: str, zero: Running, tmp: Path) -> tuple[float, float]:
    flags = (*LOAD, "--custom-dataset-type", kind)
    timed = await run(Dagperf(workers=2), data, zero, tmp / "timed", *flags, sample=False)
    sampled = await run(Dagperf(workers=2), data, zero, tmp / "sampled", *flags)
    return timed.first_request_s, sampled.peak_rss_mb


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    zero = Running.start()
    try:
        with tempfile.TemporaryDirectory() as name:
            tmp = Path(name)
            directory = traces(tmp / "traces", args.sessions)
            size = sum(p.stat().st_size for p in directory.glob("*.json"))
            dag = same_size(tmp / "trees.dag.jsonl", size)
            inputs = {"weka_trace": directory, "dag_jsonl": dag}
            print(f"{args.sessions} traces: {size / 1e6:.0f} MB; "
                  f"dag_jsonl: {dag.stat().st_size / 1e6:.0f} MB")  # fmt: skip
            firsts: dict[str, list[float]] = {kind: [] for kind in inputs}
            peaks: dict[str, list[float]] = {kind: [] for kind in inputs}
            for r in range(args.rounds):
                for kind in inputs if r % 2 == 0 else reversed(inputs):
                    first, peak = await measure(inputs[kind], kind, zero, tmp / f"{kind}-{r}")
                    firsts[kind].append(first)
                    peaks[kind].append(peak)
                    print(f"  round {r + 1} {kind:>10}: first request {first:.2f} s, "
                          f"peak RSS {peak:,.0f} MB", flush=True)  # fmt: skip
            print(f"{'input':>10} {'first request s':>16} {'peak RSS MB':>12} "
                  f"{'validate s':>11} {'validate MB':>12}")  # fmt: skip
            for kind, data in inputs.items():
                check_s, check_mb = validate_as(data, kind)
                print(f"{kind:>10} {statistics.median(firsts[kind]):>16.2f} "
                      f"{statistics.median(peaks[kind]):>12,.0f} {check_s:>11.2f} "
                      f"{check_mb:>12,.0f}")  # fmt: skip
    finally:
        zero.stop()


def validate_as(data: Path, kind: str) -> tuple[float, float]:
    if kind == "dag_jsonl":
        return validate(data)
    import time

    script = (
        "import resource, sys; from dagperf.cli import main; "
        "main(['validate', sys.argv[1], '--custom-dataset-type', 'weka_trace']); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", script, str(data)], check=True, capture_output=True, text=True
    )
    return time.perf_counter() - started, int(done.stdout.split()[-1]) / 1024


if __name__ == "__main__":
    asyncio.run(main())
