"""Synthetic coding-agent sessions in Weka's trace format (weka_trace), made from a seed, never
copied from a recording.

    python bench/agent_traces.py OUT_DIR [--sessions 1000] [--seed 7] [--turns 12 40]
                                 [--scale 1.0] [--time-scale 1.0]

Each session is what a coding agent's recording looks like to a KV cache: a main agent whose
prompt grows turn by turn (tool definitions and a system prompt first, then each turn's tool
results and the reply before it), compacted back to its prefix when it grows past a limit;
one-shot side calls on a small model with a fresh context (a title, a web summary); and
sub-agents, each with its own calls, opening with the main agent's tool definitions (the same
blocks: the prefix a router can reuse), which the main agent waits for, or, now and then, does
not (a background sub-agent). Block ids are per session; a prompt's ids cover its whole blocks,
its partial last block is new in the next turn. Times are seconds: server time from the prompt
and reply lengths, think time between calls; `--time-scale` shrinks both (a test replays a
session in a second or two), `--scale` the token counts.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOCK = 64


@dataclass
class _Session:
    rng: random.Random
    scale: float
    time_scale: float
    next_id: int = 1
    requests: list[dict[str, Any]] = field(default_factory=list)

    def fresh(self, count: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + count))
        self.next_id += count
        return ids

    def tokens(self, low: int, high: int) -> int:
        return max(1, int(self.rng.randint(low, high) * self.scale))

    def seconds(self, value: float) -> float:
        return round(value * self.time_scale, 6)

    def server_time(self, tokens_in: int, tokens_out: int) -> float:
        return self.seconds(0.2 + tokens_in / 20000 + tokens_out / 60)


def _call(session: _Session, t: float, model: str, ids: list[int], tokens_in: int, out: int,
          kind: str) -> dict[str, Any]:  # fmt: skip
    api = session.server_time(tokens_in, out)
    call: dict[str, Any] = {
        "type": kind, "t": round(t, 6), "model": model, "in": tokens_in, "out": out,
        "hash_ids": ids[: tokens_in // BLOCK], "api_time": api,
        "input_types": ["tool_result"], "stop": "tool_use",
    }  # fmt: skip
    if kind == "s":
        call["ttft"] = round(api * 0.3, 6)
    return call


def session(index: int, seed: int, turns: tuple[int, int], scale: float, time_scale: float
            ) -> dict[str, Any]:  # fmt: skip
    """One session's trace document."""
    rng = random.Random(f"{seed}:{index}")
    s = _Session(rng, scale, time_scale)
    tools, system = s.tokens(6000, 9000), s.tokens(1500, 2500)
    prefix = s.fresh(-(-(tools + system) // BLOCK))
    limit = s.tokens(60000, 90000)
    ids, tokens_in, t = list(prefix), len(prefix) * BLOCK + s.tokens(200, 600), 0.0
    ids += s.fresh(max(0, tokens_in // BLOCK - len(ids)) + 1)
    out = s.tokens(100, 600)
    sub_agents = rng.randint(1, 2)
    sub_turns = sorted(rng.sample(range(2, max(3, turns[0])), k=sub_agents))
    for k in range(rng.randint(*turns)):
        s.requests.append(_call(s, t, "opus", ids, tokens_in, out, rng.choice("sn")))
        t += s.requests[-1]["api_time"] + s.seconds(rng.uniform(0.5, 4.0))
        if rng.random() < 0.15:  # a one-shot side call on a small model, fresh context
            side_in = s.tokens(800, 3000)
            side = _call(s, t, "haiku", s.fresh(side_in // BLOCK), side_in, s.tokens(20, 60), "n")
            s.requests.append(side)
            t += side["api_time"] + s.seconds(rng.uniform(0.1, 1.0))
        if k in sub_turns:
            t = _sub_agent(s, t, prefix, tools, len(sub_turns), k == sub_turns[-1])
        grown = tokens_in + out + s.tokens(200, 3000)
        kept = ids[: tokens_in // BLOCK]  # its whole blocks: the partial last one changes
        if grown > limit:  # compaction: back to the prefix and a summary
            grown = len(prefix) * BLOCK + s.tokens(2000, 5000)
            kept = list(prefix)
        ids = kept + s.fresh(grown // BLOCK - len(kept) + 1)
        tokens_in, out = grown, s.tokens(100, 800)
    return {
        "id": f"coding-agent-{index:05d}", "models": ["opus", "haiku"], "block_size": BLOCK,
        "hash_id_scope": "local", "tool_tokens": tools, "system_tokens": system,
        "requests": s.requests,
    }  # fmt: skip


def _sub_agent(s: _Session, t: float, prefix: list[int], tools: int, count: int,
               last: bool) -> float:  # fmt: skip
    """A sub-agent started at `t`; returns when the main agent goes on (after it, unless it
    runs in the background)."""
    rng = s.rng
    agent_id = f"agent_{len(s.requests):03d}"
    shared = prefix[: tools // BLOCK]  # the main agent's tool definitions, block for block
    own_system = s.tokens(500, 1500)
    tokens_in = -(-(tools + own_system) // BLOCK) * BLOCK + s.tokens(300, 1200)
    ids = shared + s.fresh(tokens_in // BLOCK - len(shared) + 1)
    calls, start, now = [], t, t + s.seconds(rng.uniform(0.05, 0.5))
    for _ in range(rng.randint(2, 6)):
        out = s.tokens(50, 400)
        calls.append(_call(s, now, "haiku", ids, tokens_in, out, "s"))
        now += calls[-1]["api_time"] + s.seconds(rng.uniform(0.2, 1.5))
        grown = tokens_in + out + s.tokens(300, 2000)
        kept = ids[: tokens_in // BLOCK]
        ids = kept + s.fresh(grown // BLOCK - len(kept) + 1)
        tokens_in = grown
    duration = now - start
    s.requests.append({
        "type": "subagent", "t": round(start, 6), "agent_id": agent_id,
        "subagent_type": "Explore", "status": "completed", "models": ["haiku"],
        "duration_ms": int(duration * 1000), "tool_tokens": tools,
        "system_tokens": own_system, "requests": calls,
    })  # fmt: skip
    background = last and count > 1 and rng.random() < 0.5
    return t + s.seconds(0.2) if background else now + s.seconds(rng.uniform(0.1, 1.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="the directory to write the sessions into")
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--turns", type=int, nargs=2, default=(12, 40), metavar=("MIN", "MAX"))
    parser.add_argument("--scale", type=float, default=1.0, help="token counts, times this")
    parser.add_argument("--time-scale", type=float, default=1.0, help="times, times this")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    size = 0
    for i in range(args.sessions):
        document = session(i, args.seed, tuple(args.turns), args.scale, args.time_scale)
        text = json.dumps(document, indent=1) + "\n"
        (args.out / f"{document['id']}.json").write_text(text)
        size += len(text)
    print(f"{args.sessions} sessions, {size / 1e6:.1f} MB in {args.out}")


if __name__ == "__main__":
    main()
