"""Round and think-time gaps of AIPerf 0.13 and dagperf on the same orchestrator spines.

    python bench/agentic_timing.py [--repeat N]

Each spine runs in both tools against the same recording simulator (tests/aiperf_reference.py,
which runs AIPerf from its own environment: `bash tests/aiperf_install.sh` first), fresh every
time, never from the tests' cache. A round starts when nothing is in flight: the gap before it
is from the previous round's last end to its first arrival at the server. Both tools' gaps are
printed per round, with their difference; the target is within 50 ms on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import aiperf_reference as reference  # noqa: E402

ONE_ROOT = ("--concurrency", "1", "--num-conversations", "1")
SPINES = {
    "integer rounds, think 150 ms": ROOT / "examples" / "agentic" / "spine.dag.jsonl",
    "list of rounds, 100 ms then 300 ms": ROOT / "tests" / "aiperf_cases" / "spine-list.dag.jsonl",
    "lognormal around 120 ms, seed 5": ROOT / "tests" / "aiperf_cases" / "lognormal.dag.jsonl",
}
QUIET_MS = 20.0  # a gap shorter than this is a turn following its own, not a round's wait


def round_gaps(run: reference.Recording) -> list[float]:
    """The gaps (ms) before each round after the first: a request that arrives when every
    earlier one has ended, and more than QUIET_MS after the last of them ended."""
    gaps = []
    ended = None
    for sent in run.sent:
        if ended is not None and sent.received_ns > ended:
            gap = (sent.received_ns - ended) / 1e6
            if gap > QUIET_MS:
                gaps.append(gap)
        ended = sent.end_ns if ended is None else max(ended, sent.end_ns)
    return gaps


async def measure(path: Path, flags: tuple[str, ...]) -> tuple[list[float], list[float]]:
    theirs = await reference.aiperf(path, "dag_jsonl", *flags, cached=False)
    with tempfile.TemporaryDirectory() as out:
        ours = await reference.dagperf(path, "dag_jsonl", Path(out), *flags)
    assert ours.returncode == 0, ours.log[-2000:]
    return round_gaps(theirs), round_gaps(ours)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs of each spine in each tool")
    args = parser.parse_args()
    worst = 0.0
    for label, path in SPINES.items():
        flags = (*ONE_ROOT, "--random-seed", "5")
        for attempt in range(args.repeat):
            theirs, ours = await measure(path, flags)
            pairs = list(zip(theirs, ours, strict=False))
            shown = ", ".join(f"{a:.0f} / {d:.0f}" for a, d in pairs)
            differences = [abs(a - d) for a, d in pairs]
            worst = max([worst, *differences])
            print(f"{label} (run {attempt + 1}): gaps AIPerf / dagperf ms: {shown}")
            if len(theirs) != len(ours):
                print(f"  rounds seen: AIPerf {len(theirs)}, dagperf {len(ours)}")
    print(f"largest difference: {worst:.1f} ms (target: within 50 ms)")


if __name__ == "__main__":
    asyncio.run(main())
