"""The tools under comparison, run the same way: a command line, a dataset file, one server.

Each run is a child process tree; it is measured from outside, identically for both tools:
CPU per request in the steady state (the tree's user + system time from /proc, sampled every
50 ms beside the server's request count, between 10% and 90% of the run's requests, so start-up
and teardown do not count), total CPU (the kernel's accounting of reaped children), peak resident
memory (the tree's RSS, sampled likewise), and what the tool's own export files say
(`profile_export.jsonl`, `profile_export_aiperf.json`, the same format for both).

AIPerf, when found, runs offline: its chat endpoint insists on a tokenizer, so a small one is
trained here and laid out as a Hugging Face cache, and proxies point at a dead loopback port so
nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from endpoint import Running


@dataclass
class Run:
    tool: str
    records: list[dict[str, Any]]
    summary: dict[str, Any]
    cpu_s: float
    peak_rss_mb: float
    launched_ns: int
    samples_mb: list[float] = field(default_factory=list)  # tree RSS over the run
    steady_cpu_ms: float | None = None  # CPU per request between 10% and 90% of the requests
    steady_root_cpu_ms: float | None = None  # the tool's first process alone (dagperf's scheduler)
    steady_cpu_share: float | None = None  # CPU seconds per second over the same stretch

    @property
    def throughput(self) -> float:
        return self.summary["request_throughput"]["avg"]

    @property
    def first_request_s(self) -> float:
        """From the tool's launch to its first request's start, as it recorded it."""
        first = min(r["metadata"]["request_start_ns"] for r in self.records)
        return (first - self.launched_ns) / 1e9


def dataset(path: Path, roots: int, forks: int = 0) -> Path:
    """`roots` one-turn conversations, each forking `forks` one-turn children."""
    with path.open("w") as f:
        for r in range(roots):
            kids = [f"r{r}-f{k}" for k in range(forks)]
            turn: dict[str, Any] = {
                "messages": [{"role": "user", "content": f"question {r}"}],
                "max_tokens": 16,
            }
            if kids:
                turn["forks"] = kids
            f.write(json.dumps({"session_id": f"r{r}", "turns": [turn]}) + "\n")
            for kid in kids:
                child = {"messages": [{"role": "user", "content": "go on"}], "max_tokens": 16}
                f.write(json.dumps({"session_id": kid, "turns": [child]}) + "\n")
    return path


def _shared_flags(data: Path, url: str) -> list[str]:
    """The flags both tools take alike: the same dataset, server and request shape."""
    return [
        "--input-file",
        str(data),
        "--custom-dataset-type",
        "dag_jsonl",
        "--url",
        url,
        "--model",
        "m",
        "--endpoint-type",
        "chat",
        "--streaming",
    ]


class Dagperf:
    name = "dagperf"
    retries = 0

    def __init__(self, workers: int = 2):
        self.workers = workers

    def command(self, data: Path, url: str, out: Path, load: list[str]) -> list[str]:
        return [
            sys.executable,
            "-m",
            "dagperf",
            "profile",
            *_shared_flags(data, url),
            "--artifact-dir",
            str(out),
            "--quiet",
            "--workers",
            str(self.workers),
            *load,
        ]

    def env(self) -> dict[str, str]:
        return dict(os.environ)


class AIPerf:
    name = "AIPerf"
    retries = 1  # one run in a full bench has failed with no message; a second try is fair

    def __init__(self, executable: str, home: Path):
        self.executable = executable
        self.home = home
        _offline_tokenizer(home / "hf")

    def command(self, data: Path, url: str, out: Path, load: list[str]) -> list[str]:
        return [
            self.executable,
            "profile",
            *_shared_flags(data, url),
            "--tokenizer",
            "local/tiny-bpe",
            "--ui-type",
            "none",
            "--output-artifact-dir",
            str(out),
            *load,
        ]

    def env(self) -> dict[str, str]:
        dead = "http://127.0.0.1:9"
        return os.environ | {
            "HF_HOME": str(self.home / "hf"),
            "HF_HUB_OFFLINE": "1",
            "HTTP_PROXY": dead,
            "HTTPS_PROXY": dead,
            "NO_PROXY": "",
            "TMPDIR": str(self.home),
        }


def find_aiperf(given: str | None) -> str | None:
    for candidate in (given, shutil.which("aiperf"), "/tmp/aiperf-venv/bin/aiperf"):
        if candidate and Path(candidate).exists():
            return candidate
    return None


async def run(
    tool: Dagperf | AIPerf,
    data: Path,
    server: Running,
    out: Path,
    *load: str,
    count_served: bool = False,
    sample: bool = True,
) -> Run:
    """One run of a tool (tried again if the tool allows), failing loudly; its console goes to
    `out/console.log`. The server is reset before every attempt, so what it recorded and counted
    is this run's alone. `count_served` samples its request count beside the tree (for the steady
    CPU figures); `sample=False` leaves the tree alone (reading /proc costs CPU, which timing runs
    should not share with the tool)."""
    url = server.url
    for attempt in range(1 + tool.retries):
        server.ask("/reset", "POST")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        launched = time.time_ns()
        out.mkdir(parents=True, exist_ok=True)
        with (out / "console.log").open("wb") as console:
            process = await asyncio.create_subprocess_exec(
                *tool.command(data, url, out, list(load)),
                env=tool.env(),
                stdout=console,
                stderr=asyncio.subprocess.STDOUT,
            )
            samples: list[float] = []
            progress: list[tuple[int, float, float, float]] = []  # served, tree CPU, root CPU, s
            waiter = asyncio.ensure_future(process.wait())
            while sample and not waiter.done():
                rss_kb, cpu_s, root_s = tree_usage(process.pid)
                samples.append(rss_kb / 1024)
                if count_served:
                    served = server.ask("/stats")["requests"]
                    progress.append((served, cpu_s, root_s, time.monotonic()))
                await asyncio.wait([waiter], timeout=0.05)
            await waiter
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if process.returncode == 0:
            break
        tail = (out / "console.log").read_text(errors="replace")[-3000:]
        if attempt == tool.retries:
            raise SystemExit(f"{tool.name} failed (exit {process.returncode}):\n{tail}")
        print(f"  ({tool.name} failed, exit {process.returncode}; trying once more)", flush=True)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    records = [json.loads(line) for line in (out / "profile_export.jsonl").open()]
    summary = json.loads((out / "profile_export_aiperf.json").read_text())
    return Run(
        tool.name,
        records,
        summary,
        cpu,
        max(samples, default=0.0),
        launched,
        samples,
        *_steady(progress),
    )


def _steady(progress: list[tuple[int, float, float, float]]) -> tuple[float | None, ...]:
    """CPU ms per request for the tree and for its root, and the tree's CPU share (seconds per
    second), between 10% and 90% of the requests served."""
    if not progress or progress[-1][0] - progress[0][0] < 20:
        return None, None, None
    first = progress[0][0]  # requests served before the first sample are start-up
    total = progress[-1][0] - first
    low = next(p for p in progress if p[0] - first >= total * 0.1)
    high = next(p for p in progress if p[0] - first >= total * 0.9)
    served, clock = high[0] - low[0], high[3] - low[3]
    if served <= 0 or clock <= 0:
        return None, None, None
    tree, root = high[1] - low[1], high[2] - low[2]
    return 1000 * tree / served, 1000 * root / served, tree / clock


TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def tree_usage(root: int) -> tuple[int, float, float]:
    """Resident memory (kB) of a process and its live descendants, their CPU time (s) including
    descendants that exited and were waited for, and the CPU time of the process alone."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    cpu: dict[int, float] = {}
    root_cpu = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            status = (entry / "status").read_text()
        except OSError:
            continue
        pid = int(entry.name)
        fields = stat.rsplit(")", 1)[1].split()
        parents[pid] = int(fields[1])
        # utime + stime, plus cutime + cstime: a child that exited and was waited for keeps
        # counting in its parent, so the tree's CPU never drops as processes come and go
        cpu[pid] = sum(int(f) for f in fields[11:15]) * TICK_S
        if pid == root:
            root_cpu = (int(fields[11]) + int(fields[12])) * TICK_S
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
    tree_cpu = sum(cpu.get(pid, 0.0) for pid in tree)
    return sum(rss.get(pid, 0) for pid in tree), tree_cpu, root_cpu


def _offline_tokenizer(home: Path) -> None:
    """A word-level BPE tokenizer in a Hugging Face cache layout, trained here, offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    snapshot = home / "hub" / "models--local--tiny-bpe" / "snapshots" / ("0" * 40)
    if (snapshot / "tokenizer.json").exists():
        return
    snapshot.mkdir(parents=True)
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(special_tokens=["[UNK]", "<s>", "</s>"], vocab_size=200)
    text = "question go on t0 t1 t2 t3 t4 t5 t6 t7 t8 t9 the a of to and user assistant"
    tokenizer.train_from_iterator([text] * 10, trainer)
    tokenizer.save(str(snapshot / "tokenizer.json"))
    (snapshot / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "[UNK]",
                "model_max_length": 100000,
            }
        )
    )
    (snapshot / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    refs = home / "hub" / "models--local--tiny-bpe" / "refs"
    refs.mkdir(parents=True)
    (refs / "main").write_text("0" * 40)
