"""How big report.html gets and how long `dagperf report` takes, as runs grow.

    python bench/report_size.py [--requests 100000]

Runs the agent-tree example (FORK, SPAWN, a join, authored delays) on the built-in simulator
with zero latency, then `dagperf report` on it, and prints the records file's size, the
report's size (the Plotly bundle is about 4.8 MB of it), the time to write it and the report
process's peak RSS. What is drawn is capped (CDF points, histogram bins, throughput buckets,
the 40 slowest trees), so the report's size stays flat while the records grow.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATASET = ROOT / "examples" / "report" / "agent-tree.dag.jsonl"


REPORT = (
    "import resource, sys; from dagperf.cli import main; main(['report', sys.argv[1]]); "
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
)


def dagperf(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "dagperf", *args], check=True, capture_output=True)


def measure(requests: int, base: Path) -> tuple[float, float, float, float]:
    run = base / f"run-{requests}"
    dagperf(
        "profile", "--input-file", str(DATASET), "--streaming", "--concurrency", "64",
        "--request-count", str(requests), "--sim-ttft-ms", "0", "--sim-itl-ms", "0",
        "--sim-prefill-ms-per-token", "0", "--artifact-dir", str(run), "--quiet",
    )  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", REPORT, str(run)], check=True, capture_output=True, text=True
    )
    took = time.perf_counter() - started
    peak_kb = int(done.stdout.split()[-1])
    records = (run / "profile_export.jsonl").stat().st_size / 1e6
    report = (run / "report.html").stat().st_size / 1e6
    return records, report, took, peak_kb / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=100_000)
    args = parser.parse_args()
    sizes = sorted({max(args.requests // 100, 100), max(args.requests // 10, 100), args.requests})
    print(
        f"{'requests':>10} {'records MB':>11} {'report MB':>10} {'report s':>9} {'peak RSS MB':>12}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            records, report, took, rss = measure(n, Path(tmp))
            print(f"{n:>10,} {records:>11.1f} {report:>10.2f} {took:>9.2f} {rss:>12.0f}")


if __name__ == "__main__":
    main()
