"""Two versions of dagperf side by side: a named commit against the current checkout, taking
turns on one endpoint, so a change of speed is seen against the same machine's same minutes.

    python bench/ab.py BASELINE_REF [--candidate REF] [--requests 20000] [--concurrency 64]
                       [--rounds 5] [--workers 2] [--same-env] [--startup FILE]

The baseline is the commit's tree (`git archive`) installed with pip into a virtualenv of its
own (pip's cache makes that quick); the candidate is the checkout this script belongs to, run by
the interpreter running the script, or another commit with `--candidate`. `--same-env` runs a
commit from its source tree with this interpreter's packages instead of installing it: quicker,
for bisecting, when the dependencies did not change. Everything goes in one temporary directory,
removed at the end. Each side has a bytecode cache of its own there (PYTHONPYCACHEPREFIX),
filled by one untimed warm-up run, so neither compiles its modules during the timed runs, as an
installed dagperf does not (a checkout run under PYTHONDONTWRITEBYTECODE otherwise would).

The endpoint is bench/endpoint.py's zero-delay server (16 streamed tokens, usage, [DONE]): the
one bench/compare.py measures against, in a process of its own, an order of magnitude above what
dagperf reaches, and it counts what it served, which the steady-state figures need. Its CPU is
its own process's, so it is not in either side's figures.

Each round runs both sides once on the same streaming chat workload (64 one-turn conversations
cycled to `--requests`), in turn: A then B on odd rounds, B then A on even ones, so a machine
growing busier or quieter weighs on both alike. Per run, measured from outside as bench/tools.py
measures any tool: the tool's own requests/s; CPU per request in the steady state (user + system
time of the whole process tree from /proc, between 10% and 90% of the requests served); CPU per
request over the whole run (the kernel's accounting of the reaped tree, start-up and the health
check included); the load average at its start and end; and the other processes' share of the
machine while it ran (busy time from /proc/stat less the tree's, the endpoint's and this
script's), in cores: the noise. At the end, the medians of each side and their ratios.

With `--startup FILE` each round times launch to first request on that dag_jsonl file instead
(2,000 requests, as bench/scale.py's start-up does), for a change to how a dataset is read.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from endpoint import Running
from tools import Dagperf, dataset, run

REPO = Path(__file__).resolve().parent.parent
TICK_S = 1 / os.sysconf("SC_CLK_TCK")


@dataclass
class Side:
    """One version of dagperf: what it is called in the output, and how it is run."""

    label: str
    python: str
    env: dict[str, str]
    source: Path  # where its `dagperf` package must be imported from


class Tool(Dagperf):
    def __init__(self, side: Side, workers: int):
        super().__init__(workers)
        self.side = side

    def command(self, data: Path, url: str, out: Path, load: list[str]) -> list[str]:
        return [self.side.python, *super().command(data, url, out, load)[1:]]

    def env(self) -> dict[str, str]:
        return self.side.env


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def resolve(ref: str) -> str:
    try:
        return git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except subprocess.CalledProcessError:
        raise SystemExit(f"ab.py: {ref!r} names no commit of {REPO}") from None


def unpack(commit: str, into: Path) -> Path:
    """The commit's tree, as `git archive` gives it (no .git, nothing untracked)."""
    into.mkdir(parents=True)
    archive = subprocess.Popen(
        ["git", "-C", str(REPO), "archive", "--format=tar", commit], stdout=subprocess.PIPE
    )
    with tarfile.open(fileobj=archive.stdout, mode="r|") as tar:
        tar.extractall(into, filter="data")
    if archive.wait() != 0:
        raise SystemExit(f"ab.py: git archive {commit} failed")
    return into


def installed(commit: str, tmp: Path, same_env: bool) -> Side:
    tree = unpack(commit, tmp / f"src-{commit[:10]}")
    label = git("rev-parse", "--short", commit)
    if same_env:
        env = os.environ | {"PYTHONPATH": str(tree / "worker")}
        return Side(label, sys.executable, env, tree / "worker")
    venv = tmp / f"venv-{commit[:10]}"
    print(f"installing {label} into a temporary virtualenv (pip's cache)...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--disable-pip-version-check", str(tree)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return Side(label, str(venv / "bin" / "python"), env, venv)


def checkout() -> Side:
    label = git("rev-parse", "--short", "HEAD")
    if git("status", "--porcelain", "--untracked-files=no"):
        label += "+edits"
    return Side(label, sys.executable, dict(os.environ), REPO / "worker")


def compiled(side: Side, tmp: Path) -> Side:
    """The side with a bytecode cache of its own, filled by the warm-up run: a checkout run with
    PYTHONDONTWRITEBYTECODE (as this machine sets it) would otherwise compile every module in
    every process of every run, a cost a pip-installed dagperf never pays, and one side only."""
    env = {k: v for k, v in side.env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp / f"pycache-{side.label}")
    return Side(side.label, side.python, env, side.source)


def check_import(side: Side) -> None:
    """Each side must run the dagperf it names: a stray install would make both sides one."""
    found = subprocess.run(
        [side.python, "-c", "import dagperf; print(dagperf.__file__)"],
        env=side.env,
        capture_output=True,
        text=True,
    )
    where = Path(found.stdout.strip() or "/nonexistent").resolve()
    if found.returncode != 0 or not where.is_relative_to(side.source.resolve()):
        problem = found.stderr.strip().splitlines()[-1:] or [f"found at {where}"]
        raise SystemExit(f"ab.py: {side.label}'s dagperf is not under {side.source}: {problem[0]}")


@dataclass
class Figures:
    throughput: float
    steady_ms: float
    whole_ms: float
    load: tuple[float, float]
    others_cores: float


def busy_s() -> float:
    """The machine's busy time so far (every CPU), from /proc/stat."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) * TICK_S


def process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


async def measure(side: Side, args: argparse.Namespace, data: Path, zero: Running, out: Path):
    load = ("--concurrency", str(args.concurrency), "--request-count", str(args.requests))
    before = (busy_s(), process_cpu_s(zero.process.pid), own_cpu_s(), time.monotonic())
    load_before = load_average()
    result = await run(Tool(side, args.workers), data, zero, out, *load, count_served=True)
    after = (busy_s(), process_cpu_s(zero.process.pid), own_cpu_s(), time.monotonic())
    busy, server, own, clock = (b - a for a, b in zip(before, after, strict=True))
    if result.steady_cpu_ms is None:
        raise SystemExit(f"ab.py: {side.label} served too few requests to measure ({out})")
    return Figures(
        result.throughput,
        result.steady_cpu_ms,
        1000 * result.cpu_s / args.requests,
        (load_before, load_average()),
        max(0.0, busy - server - own - result.cpu_s) / clock,
    )


def line(label: str, f: Figures) -> str:
    return (
        f"  {label:<16} {f.throughput:>9,.0f} req/s   CPU/request {f.steady_ms:.3f} ms steady, "
        f"{f.whole_ms:.3f} ms whole run   load {f.load[0]:.1f}->{f.load[1]:.1f}, "
        f"others {f.others_cores:.2f} cores"
    )


def ratios(a: dict[str, float], b: dict[str, float]) -> str:
    return (
        f"  {'B / A':<16} {b['throughput'] / a['throughput']:>9.2f}x req/s"
        f"   CPU/request {b['steady_ms'] / a['steady_ms']:.2f}x steady, "
        f"{b['whole_ms'] / a['whole_ms']:.2f}x whole run"
    )


def medians(runs: list[Figures]) -> dict[str, float]:
    return {
        key: statistics.median(getattr(f, key) for f in runs)
        for key in ("throughput", "steady_ms", "whole_ms", "others_cores")
    }


async def compare(args: argparse.Namespace, tmp: Path) -> None:
    baseline = installed(resolve(args.baseline), tmp, args.same_env)
    candidate = (
        installed(resolve(args.candidate), tmp, args.same_env) if args.candidate else checkout()
    )
    if baseline.label == candidate.label:
        candidate.label += "'"
    baseline, candidate = compiled(baseline, tmp), compiled(candidate, tmp)
    for side in (baseline, candidate):
        check_import(side)
    data = dataset(tmp / "flat.jsonl", 64)
    zero = Running.start()
    try:
        for side in (baseline, candidate):  # untimed: fills the bytecode and page caches
            warm = ("--concurrency", str(args.concurrency), "--request-count", "500")
            await run(Tool(side, args.workers), data, zero, tmp / f"warm-{side.label}", *warm)
        if args.startup:
            await startups(args, (baseline, candidate), zero, tmp)
        else:
            await steady(args, (baseline, candidate), data, zero, tmp)
    finally:
        zero.stop()


async def startups(
    args: argparse.Namespace, sides: tuple[Side, Side], zero: Running, tmp: Path
) -> None:
    """Launch to first request on the `--startup` file (bench/scale.py's measure), in turns."""
    data = Path(args.startup)
    print(
        f"A = {sides[0].label}, B = {sides[1].label}: {args.rounds} rounds of launch to first "
        f"request on {data} ({data.stat().st_size / 1e6:,.0f} MB), 2,000 requests at concurrency "
        f"64, --workers {args.workers}; {os.cpu_count()} cores",
        flush=True,
    )
    taken: dict[str, list[float]] = {side.label: [] for side in sides}
    load = ("--concurrency", "64", "--request-count", "2000")
    for round_ in range(1, args.rounds + 1):
        for side in sides if round_ % 2 else sides[::-1]:
            out = tmp / f"{round_}-{side.label}"
            done = await run(Tool(side, args.workers), data, zero, out, *load, sample=False)
            taken[side.label].append(done.first_request_s)
            print(f"  round {round_}  {side.label:<16} {done.first_request_s:.2f} s", flush=True)
    a, b = (statistics.median(taken[side.label]) for side in sides)
    print(f"medians: A {a:.2f} s, B {b:.2f} s, B / A {b / a:.2f}x")


async def steady(
    args: argparse.Namespace, sides: tuple[Side, Side], data: Path, zero: Running, tmp: Path
) -> None:
    """CPU per request on the flat dataset, in turns."""
    baseline, candidate = sides
    print(
        f"A = {baseline.label}, B = {candidate.label}: {args.rounds} rounds of {args.requests:,} "
        f"streaming chat requests at concurrency {args.concurrency}, --workers {args.workers}, "
        f"against bench/endpoint.py (zero delay); {os.cpu_count()} cores",
        flush=True,
    )
    runs: dict[str, list[Figures]] = {baseline.label: [], candidate.label: []}
    for round_ in range(1, args.rounds + 1):
        order = (baseline, candidate) if round_ % 2 else (candidate, baseline)
        print(f"round {round_}", flush=True)
        done: dict[str, Figures] = {}
        for side in order:
            out = tmp / f"{round_}-{side.label}"
            done[side.label] = await measure(side, args, data, zero, out)
            runs[side.label].append(done[side.label])
            print(line(side.label, done[side.label]), flush=True)
        print(ratios(asdict(done[baseline.label]), asdict(done[candidate.label])), flush=True)
    a, b = medians(runs[baseline.label]), medians(runs[candidate.label])
    print(f"medians of {args.rounds} rounds (A = {baseline.label}, B = {candidate.label})")
    for label, m in ((baseline.label, a), (candidate.label, b)):
        print(
            f"  {label:<16} {m['throughput']:>9,.0f} req/s   CPU/request {m['steady_ms']:.3f} ms "
            f"steady, {m['whole_ms']:.3f} ms whole run   others {m['others_cores']:.2f} cores"
        )
    print(ratios(a, b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline", metavar="BASELINE_REF", help="the commit to compare against")
    parser.add_argument("--candidate", metavar="REF", help="a commit instead of this checkout")
    parser.add_argument("--requests", type=int, default=20_000, help="per run (default 20,000)")
    parser.add_argument("--concurrency", type=int, default=64, help="(default 64)")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each side (default 5)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument(
        "--same-env",
        action="store_true",
        help="run commits from their source with this interpreter's packages (no install)",
    )
    parser.add_argument(
        "--startup",
        metavar="FILE",
        help="time launch to first request on this dag_jsonl file instead (bench/scale.py's)",
    )
    args = parser.parse_args()
    if args.startup and not Path(args.startup).is_file():
        parser.error(f"--startup: no such file: {args.startup}")
    if min(args.requests, args.concurrency, args.rounds, args.workers) < 1:
        parser.error("--requests, --concurrency, --rounds and --workers must be at least 1")
    with tempfile.TemporaryDirectory(prefix="dagperf-ab-") as name:
        asyncio.run(compare(args, Path(name)))


if __name__ == "__main__":
    main()
