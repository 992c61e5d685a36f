"""The exports of every example under examples/ hold the same records and figures from one
change to the next: each example runs against the built-in simulator (one worker, one request
at a time, a fixed seed), and its export files, with what differs between any two runs masked
(`masked`), are compared with tests/golden/<example>.json.

What is masked: times and everything computed from them (latencies, throughputs, durations,
timestamps, confidence bounds, the critical path's shares and its slowest sessions), ids
(request and correlation ids, session numbers, the benchmark id, worker ids), addresses and
paths, the last digits of floats, and the health checks' findings (a timing
check may pass or fail by the machine's load); their names stay. What is kept: every file and
field, the records' conversations, turns, dependencies, token counts and errors, BranchStats,
every count, the CSV's rows, and inputs.json's payloads.

A fixture holds a digest of each field of each file's masked content (the test names the
fields that moved; `exports` shows what they hold). After a change meant to move an export,
write the fixtures again:

    DAGPERF_GOLDEN_UPDATE=1 bash tests/run.sh tests/test_golden_exports.py
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from test_cli import EXAMPLE_TYPES, NEEDS_LM_EVAL

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
UPDATE = os.environ.get("DAGPERF_GOLDEN_UPDATE") == "1"
# One xdist worker runs them all, so the examples run once (`runs`), not once per worker.
pytestmark = pytest.mark.xdist_group("golden")
EXAMPLES = sorted(set(EXAMPLE_TYPES) - NEEDS_LM_EVAL)  # lm-eval-harness is an optional extra

# Fewer roots where an example holds many (a session config's hundred, a pool's draws): the
# same records, in a run of seconds.
FEWER = {
    "--session-config": ["--num-conversations", "3"],
    "random_pool": ["--num-conversations", "8"],
}
TIMED_UNITS = {"ms", "sec", "requests/sec", "tokens/sec", "tokens/sec/user", "sessions/sec"}
MASKED_KEYS = {
    "x_request_id", "x_correlation_id", "parent_correlation_id", "root_correlation_id",
    "benchmark_id", "worker_id", "backend", "dagperf_version", "path", "urls", "bounds",
    "server_share", "dispatch_share", "delay_share", "join_wait_share",
    "session_num",  # numbered as sessions start: siblings racing each other swap numbers
}  # fmt: skip
TIMED_KEY = re.compile(r"(_ns|_ms|_s|_time|_seconds)$")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
ADDRESS = re.compile(r"127\.0\.0\.1:\d+")
TIMED_ROW = re.compile(r"\((ms|sec|[a-z]+/sec(/user)?)\)$")


CHOSEN_BY_TIME = {"slowest"}  # lists of what took longest: only how many there are is kept


def masked(value: Any, key: str = "") -> Any:
    if key in MASKED_KEYS or TIMED_KEY.search(key):
        return "<masked>"
    if key in CHOSEN_BY_TIME:
        return f"<{len(value)} chosen by time>"
    if isinstance(value, dict):
        if value.get("unit") in TIMED_UNITS:
            return {k: v if k in ("unit", "count") else "<t>" for k, v in value.items()}
        return {_text(k): masked(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v, key) for v in value]
    if isinstance(value, float):
        return float(f"{value:.9g}")  # a sum in another order differs in its last digits
    return _text(value) if isinstance(value, str) else value


def _text(text: str) -> str:
    return ADDRESS.sub("<address>", UUID.sub("<uuid>", text))


def _jsonl(path: Path) -> list[Any]:
    """A JSON-lines export, masked, in an order no timing decides."""
    rows = [masked(json.loads(line)) for line in path.read_text().splitlines() if line]
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True))


def _csv(path: Path) -> list[list[str]]:
    rows = list(csv.reader(io.StringIO(path.read_text())))
    return [[row[0], *("<t>" for _ in row[1:])] if row and TIMED_ROW.search(row[0]) else row
            for row in rows]  # fmt: skip


def _health(path: Path) -> dict[str, Any]:
    report = json.loads(path.read_text())
    return {"records": report["records"], "checks": [c["name"] for c in report["checks"]]}


def exports(directory: Path) -> dict[str, Any]:
    """Every file the run wrote, by name, as compared."""
    out: dict[str, Any] = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        name = path.relative_to(directory).as_posix()
        if name == "health_check.json":
            out[name] = _health(path)
        elif path.suffix == ".jsonl":
            out[name] = _jsonl(path)
        elif path.suffix == ".csv":
            out[name] = _csv(path)
        elif path.suffix == ".json":
            out[name] = masked(json.loads(path.read_text()))
        else:
            out[name] = "<present>"  # report.html and the like: that it is written
    return out


def digests(seen: dict[str, Any]) -> dict[str, Any]:
    """Each file as compared, small enough to keep: for a JSON object, a digest of each of its
    fields; for rows (JSON lines, CSV), their count and a digest of each field over every row,
    so a mismatch names the file and the field that moved (`exports` shows what they hold)."""
    out: dict[str, Any] = {}
    for name, content in seen.items():
        if isinstance(content, dict):
            out[name] = {k: _digest(v) for k, v in content.items()}
        elif isinstance(content, list) and all(isinstance(row, dict) for row in content):
            fields = sorted({k for row in content for k in row})
            out[name] = {"rows": len(content)} | {
                k: _digest([row.get(k) for row in content]) for k in fields
            }
        else:
            out[name] = _digest(content)
    return out


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _run(example: str, directory: Path) -> subprocess.CompletedProcess[str]:
    flags = EXAMPLE_TYPES[example]
    source = [*flags, example] if flags == ["--session-config"] else ["--input-file", example]
    source += [] if flags == ["--session-config"] else flags
    command = [sys.executable, "-m", "dagperf", "profile", *source, "--workers", "1"]
    # One request in flight: FORK siblings never race, so which one the simulator's prefix
    # cache serves first, and so every record's cached tokens, is the same each run.
    command += ["--concurrency", "1", "--max-inflight", "1", "--random-seed", "7", "--quiet"]
    command += next((more for key, more in FEWER.items() if key in flags), [])
    command += ["--artifact-dir", str(directory)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Path]]:
    """Every example run once, four at a time (most of each run is waiting on its simulator)."""
    base = tmp_path_factory.mktemp("golden")
    directories = {e: base / e.replace("/", "_") for e in EXAMPLES}
    with ThreadPoolExecutor(4) as pool:
        done = dict(
            zip(EXAMPLES, pool.map(lambda e: _run(e, directories[e]), EXAMPLES), strict=True)
        )
    return {e: (done[e], directories[e]) for e in EXAMPLES}


def _fixture(example: str) -> Path:
    return GOLDEN / (example.removeprefix("examples/").replace("/", "__") + ".json")


@pytest.mark.parametrize("example", EXAMPLES)
def test_an_example_s_exports_hold_the_same_records_and_figures(runs, example):
    done, directory = runs[example]
    assert done.returncode == 0, done.stdout + done.stderr
    seen = exports(directory)
    assert {"profile_export.jsonl", "profile_export_aiperf.json"} <= set(seen)
    fixture = _fixture(example)
    if UPDATE:
        fixture.parent.mkdir(exist_ok=True)
        fixture.write_text(json.dumps(digests(seen), indent=1, sort_keys=True) + "\n")
    assert fixture.exists(), f"no golden file for {example}: DAGPERF_GOLDEN_UPDATE=1 writes it"
    golden, now = json.loads(fixture.read_text()), digests(seen)
    moved = [f"{n}:{f}" for n in sorted({*golden, *now}) for f in _moved(golden.get(n), now.get(n))]
    assert not moved, f"{example}: these exports moved: {moved}"


def _moved(before: Any, after: Any) -> list[str]:
    """The fields of a file's digests that differ ("*": the whole file, or its being there)."""
    if isinstance(before, dict) and isinstance(after, dict):
        return sorted(f for f in {*before, *after} if before.get(f) != after.get(f))
    return [] if before == after else ["*"]


def test_every_golden_file_is_an_example_s():
    """A fixture left behind by an example renamed or removed would compare nothing."""
    assert {p.name for p in GOLDEN.glob("*.json")} == {_fixture(e).name for e in EXAMPLES}
