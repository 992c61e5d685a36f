"""Record what AIPerf sends for its own dataset types, as the fixtures dagperf is tested against.

    python bench/aiperf_fixtures.py [--aiperf PATH]

For each input in examples/aiperf/ (CASES and POOLS: its type and path), AIPerf runs it once at
concurrency 1 against the built-in simulator, which records every request body; the bodies, in
the order they arrived, go to tests/aiperf_fixtures/<name>.json. Live replies in a body's
history are replaced by a marker (the simulator's replies are not the point, and may change), so
the fixtures hold exactly what the dataset makes AIPerf send. A random pool is drawn POOL_DRAWS
times with a fixed seed, enough that AIPerf sends every combination of rows. ShareGPT runs as
AIPerf's public dataset, from the file laid where AIPerf looks for its download (SHAREGPT_CACHE,
under its working directory), counted with the same small tokenizer the tests give dagperf.
Needs AIPerf (0.13, offline: see bench/tools.py) and no network.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from tools import AIPerf, find_aiperf

ROOT = Path(__file__).resolve().parent.parent
INPUTS = ROOT / "examples" / "aiperf"
FIXTURES = ROOT / "tests" / "aiperf_fixtures"
LIVE_REPLY = "<live reply>"
CASES = {  # fixture name: (dataset type, input under examples/aiperf); sent exactly as AIPerf does
    "single_turn": ("single_turn", "single_turn.jsonl"),
    "multi_turn": ("multi_turn", "multi_turn.jsonl"),
    "raw_payload": ("raw_payload", "raw_payload.jsonl"),
    "raw_payload_dir": ("raw_payload", "raw_payload_dir"),
    "sharegpt": ("sharegpt", "sharegpt.json"),
}
POOLS = {  # the same, for inputs drawn at random: each request one AIPerf sent, in any order
    "random_pool": ("random_pool", "random_pool.jsonl"),
    "random_pool_dir": ("random_pool", "random_pool_dir"),
}
POOL_DRAWS, POOL_SEED = 60, 7
SHAREGPT_CACHE = Path(".cache/aiperf/datasets/ShareGPT_V3_unfiltered_cleaned_split.json")
TOKENIZER = "local/tiny-bpe"  # bench/tools.py trains it; tokenizer_json() gives dagperf its file


def without_replies(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The bodies, with every assistant message that repeats a reply the server gave marked."""
    replies = {r["reply"] for r in records if r.get("reply")}
    bodies = []
    for r in records:
        body = dict(r["body"])
        body["messages"] = [
            {**m, "content": LIVE_REPLY}
            if m.get("role") == "assistant" and m.get("content") in replies
            else m
            for m in body["messages"]
        ]
        bodies.append(body)
    return bodies


def conversations_in(kind: str, path: Path) -> int:
    """The conversations in an input (ShareGPT's: its records, some of which AIPerf drops, so
    the kept ones are sent again in order to make up the count, by AIPerf and dagperf alike)."""
    if path.is_dir():
        return len(list(path.glob("*.jsonl")))
    if kind == "sharegpt":
        return len(json.loads(path.read_text()))
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    ids = [row.get("session_id") or i for i, row in enumerate(rows)]
    return len(set(ids))


def tokenizer_json(home: Path) -> Path:
    """The tokenizer.json of TOKENIZER, trained under `home` (the same file every time)."""
    from tools import _offline_tokenizer

    _offline_tokenizer(home / "hf")
    return next((home / "hf" / "hub").glob("models--local--tiny-bpe/snapshots/*/tokenizer.json"))


def aiperf_command(
    executable: str, name: str, kind: str, data: Path, home: Path, url: str
) -> list[str]:
    """AIPerf's command for one input; it runs in `home`."""
    if kind == "sharegpt":  # a public dataset: from where AIPerf caches its download
        (home / SHAREGPT_CACHE).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(data, home / SHAREGPT_CACHE)
        source = ["--public-dataset", "sharegpt"]
    else:
        source = ["--input-file", str(data), "--custom-dataset-type", kind]
    if name in POOLS:
        count = ["--num-conversations", str(POOL_DRAWS), "--random-seed", str(POOL_SEED)]
    else:
        count = ["--num-conversations", str(conversations_in(kind, data))]
    return [
        executable, "profile", *source, "--url", url, "--model", "m", "--endpoint-type", "chat",
        "--tokenizer", TOKENIZER, "--ui-type", "none", "--concurrency", "1", *count,
        "--output-artifact-dir", str(home / name),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--aiperf", help="the aiperf executable")
    args = parser.parse_args()
    executable = find_aiperf(args.aiperf)
    if executable is None:
        raise SystemExit("AIPerf not found: pip install aiperf==0.13.0, or give --aiperf PATH")
    sim = subprocess.Popen(
        [sys.executable, "-m", "dagperf", "simulate", "--port", "0", "--record-bodies",
         "--model", "m"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert sim.stdout is not None
    url = sim.stdout.readline().split(" at ")[1].strip()
    try:
        with tempfile.TemporaryDirectory() as home:
            tool = AIPerf(executable, Path(home))
            for name, (kind, input_name) in (CASES | POOLS).items():
                data = INPUTS / input_name
                seen = len(json.loads(urllib.request.urlopen(url + "/sim/records").read()))
                command = aiperf_command(executable, name, kind, data, Path(home), url)
                subprocess.run(command, env=tool.env(), cwd=home, check=True, capture_output=True)
                records = json.loads(urllib.request.urlopen(url + "/sim/records").read())[seen:]
                fixture = {"aiperf": "0.13.0", "type": kind, "input": input_name,
                           "requests": without_replies(records)}  # fmt: skip
                (FIXTURES / f"{name}.json").write_text(json.dumps(fixture, indent=1) + "\n")
                print(f"{name}: {len(records)} requests")
    finally:
        sim.terminate()


if __name__ == "__main__":
    main()
