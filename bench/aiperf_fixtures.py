"""Record what AIPerf sends for its own dataset types, as the fixtures dagperf is tested against.

    python bench/aiperf_fixtures.py [--aiperf PATH]

For each input in examples/aiperf/ (CASES: its type and path), AIPerf runs it once at concurrency 1
against the built-in simulator, which records every request body; the bodies, in the order
they arrived, go to tests/aiperf_fixtures/<type>.json. Live replies in a body's history are
replaced by a marker (the simulator's replies are not the point, and may change), so the
fixtures hold exactly what the dataset makes AIPerf send. Needs AIPerf (0.13, offline: see
bench/tools.py) and no network.
"""

from __future__ import annotations

import argparse
import json
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
CASES = {  # fixture name: (dataset type, input under examples/aiperf)
    "single_turn": ("single_turn", "single_turn.jsonl"),
    "multi_turn": ("multi_turn", "multi_turn.jsonl"),
    "raw_payload": ("raw_payload", "raw_payload.jsonl"),
    "raw_payload_dir": ("raw_payload", "raw_payload_dir"),
}


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


def conversations_in(path: Path) -> int:
    if path.is_dir():
        return len(list(path.glob("*.jsonl")))
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    ids = [row.get("session_id") or i for i, row in enumerate(rows)]
    return len(set(ids))


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
            for name, (kind, input_name) in CASES.items():
                data = INPUTS / input_name
                seen = len(json.loads(urllib.request.urlopen(url + "/sim/records").read()))
                command = [
                    executable, "profile", "--input-file", str(data), "--custom-dataset-type",
                    kind, "--url", url, "--model", "m", "--endpoint-type", "chat",
                    "--tokenizer", "local/tiny-bpe", "--ui-type", "none", "--concurrency", "1",
                    "--num-conversations", str(conversations_in(data)),
                    "--output-artifact-dir", str(Path(home) / name),
                ]  # fmt: skip
                subprocess.run(command, env=tool.env(), check=True, capture_output=True)
                records = json.loads(urllib.request.urlopen(url + "/sim/records").read())[seen:]
                fixture = {"aiperf": "0.13.0", "type": kind, "input": input_name,
                           "requests": without_replies(records)}  # fmt: skip
                (FIXTURES / f"{name}.json").write_text(json.dumps(fixture, indent=1) + "\n")
                print(f"{name}: {len(records)} requests")
    finally:
        sim.terminate()


if __name__ == "__main__":
    main()
