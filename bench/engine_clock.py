"""dagperf's clock against the engine's: TTFT and ITL per request beside llama.cpp's own timings.

Starts one llama-server (tests/engines/up.sh: built on first use, a tiny random-weight model)
with its relay, runs `dagperf profile --streaming` through the relay, and joins each record
with the `timings` llama-server put in the answer (the relay logs them by X-Request-ID):

- TTFT against `prompt_ms`: the engine's prefill of the uncached prompt. The gap is what lies
  outside the engine's prefill: HTTP both ways, the relay's hop, the server's queueing,
  templating and tokenizing, and sampling the first token.
- ITL against `predicted_per_token_ms`: the engine's decode time per token. The gap is what the
  stream adds per token (server-side detokenizing and SSE framing, the network, dagperf's
  reading).

Prints the distributions and the gaps (p50 / p90), and what the relay's hop costs on its own
(GET /health through it against straight to the engine). No assertion: figures only.

    python bench/engine_clock.py [--requests 24] [--prompt-chars 800] [--max-tokens 32]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import string
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "engines"


def dataset(path: Path, requests: int, prompt_chars: int, max_tokens: int) -> Path:
    """Single-turn conversations of distinct random words: every prompt is prefilled whole."""
    rng = random.Random(0)
    with path.open("w") as f:
        for i in range(requests):
            words = []
            while sum(len(w) + 1 for w in words) < prompt_chars:
                words.append("".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))))
            turn = {"messages": [{"role": "user", "content": " ".join(words)[:prompt_chars]}]}
            f.write(
                json.dumps({"session_id": f"q{i}", "turns": [turn | {"max_tokens": max_tokens}]})
            )
            f.write("\n")
    return path


def engine_timings(directory: Path, run: Path, timeout: float = 30) -> dict[str, dict[str, Any]]:
    """X-Request-ID -> llama.cpp's timings, from the relay's log, once it has a line for every
    request of the run (the relay writes it after the answer's end, which a client may have
    taken as done a moment before)."""
    records = (run / "profile_export.jsonl").read_text().splitlines()
    wanted = {json.loads(text)["metadata"]["x_request_id"] for text in records}
    deadline = time.monotonic() + timeout
    while True:
        found = {}
        for text in (directory / "engine-0.requests.jsonl").read_text().splitlines():
            line = json.loads(text)
            if line["event"] == "answered" and line["timings"] and line["request_id"]:
                found[line["request_id"]] = line["timings"]
        if wanted <= found.keys() or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def pairs(run: Path, timings: dict[str, dict[str, Any]]) -> list[tuple[float, float, float, float]]:
    """(dagperf TTFT, engine prompt_ms, dagperf ITL, engine per-token ms) per request."""
    out = []
    for text in (run / "profile_export.jsonl").read_text().splitlines():
        record = json.loads(text)
        metrics, t = record["metrics"], timings.get(record["metadata"]["x_request_id"])
        if record["error"] or t is None or "time_to_first_token" not in metrics:
            reason = record["error"] or ("no engine timings" if t is None else "no TTFT")
            print(f"left out {record['metadata']['x_request_id']}: {reason}", file=sys.stderr)
            continue
        itl = metrics.get("inter_token_latency", {}).get("value", float("nan"))
        out.append(
            (
                metrics["time_to_first_token"]["value"],
                t["prompt_ms"],
                itl,
                t["predicted_per_token_ms"],
            )
        )
    return out


def relay_hop_ms(engine: str, relay: str, rounds: int = 50) -> float:
    """The median extra time of GET /health through the relay, against straight to the
    engine."""

    def median_ms(url: str) -> float:
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            with urllib.request.urlopen(url + "/health", timeout=30) as response:
                response.read()
            times.append(1000 * (time.perf_counter() - start))
        return float(np.median(times))

    return median_ms(relay) - median_ms(engine)


def show(name: str, values: np.ndarray) -> str:
    p50, p90 = np.nanpercentile(values, [50, 90])
    return f"  {name:<42} p50 {p50:8.2f} ms   p90 {p90:8.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--prompt-chars", type=int, default=800)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2, help="the engine's threads")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="engine-clock-") as tmp:
        work = Path(tmp)
        env = os.environ | {
            "DAGPERF_ENGINES_DIR": str(work / "engines"),
            "ENGINE_THREADS": str(args.threads),
            "PYTHON": sys.executable,
        }
        up = subprocess.run(
            [str(SCRIPTS / "up.sh"), "1"], env=env, capture_output=True, text=True, check=False
        )
        if up.returncode != 0:
            sys.exit(f"tests/engines/up.sh failed:\n{up.stderr}")
        engines = Path(up.stdout.split()[-1])
        try:
            relay = (engines / "relay-urls").read_text().split()[0]
            engine = (engines / "engine-urls").read_text().split()[0]
            data = dataset(
                work / "clock.dag.jsonl", args.requests, args.prompt_chars, args.max_tokens
            )
            run = work / "run"
            command = [sys.executable, "-m", "dagperf", "profile", "--input-file", str(data)]
            command += ["--url", relay, "--streaming", "--artifact-dir", str(run), "--quiet"]
            command += ["--concurrency", str(args.concurrency), "--extra-inputs", "ignore_eos:true"]
            subprocess.run(command, check=True, capture_output=True)
            found = pairs(run, engine_timings(engines, run))
            hop = relay_hop_ms(engine, relay)
        finally:
            subprocess.run([str(SCRIPTS / "down.sh")], env=env, capture_output=True, check=False)
    if not found:
        sys.exit("no request could be joined with the engine's timings")
    ttft, prompt, itl, per_token = (np.array(column) for column in zip(*found, strict=True))
    print(
        f"{len(found)} streamed requests, prompts of {args.prompt_chars} characters (a token "
        f"each), {args.max_tokens} tokens out, concurrency {args.concurrency}, one llama-server "
        f"({args.threads} threads)"
    )
    print(show("dagperf TTFT", ttft))
    print(show("llama.cpp prompt_ms", prompt))
    print(show("gap: TTFT - prompt_ms", ttft - prompt))
    print(show("dagperf ITL", itl))
    print(show("llama.cpp predicted_per_token_ms", per_token))
    print(show("gap: ITL - predicted_per_token_ms", itl - per_token))
    print(f"  the relay's own hop (GET /health, median)   {hop:8.2f} ms")


if __name__ == "__main__":
    main()
