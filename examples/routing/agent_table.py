"""Routing policies side by side on a coding-agent trace: one column per run directory.

    python3 examples/routing/agent_table.py RUN_DIR [RUN_DIR ...]

From each run's records (dagperf's `--backend-header x-engine` names the engine of every
request): whether each conversation stayed on one engine, where the sub-agents went against
their main agent, and the prompt the engines had cached, for the main agent's later turns and
for the sub-agents' first requests (which open with the main agent's tool definitions) and
later ones.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any


def share(records: list[dict[str, Any]]) -> str:
    prompt = sum(r["metrics"]["usage_prompt_tokens"]["value"] for r in records)
    cached = sum(r["metrics"]["usage_prompt_cache_read_tokens"]["value"] for r in records)
    return f"{100 * cached / prompt:.0f}%" if prompt else "-"


def column(run: Path) -> dict[str, str]:
    records = [json.loads(line) for line in (run / "profile_export.jsonl").open()]
    meta = [r["metadata"] for r in records]
    engines: dict[str, set[str]] = defaultdict(set)
    home: dict[str, str] = {}  # where each conversation's first request went
    for m in sorted(meta, key=lambda m: m["request_start_ns"]):
        engines[m["x_correlation_id"]].add(m["backend"])
        home.setdefault(m["x_correlation_id"], m["backend"])
    children = {m["x_correlation_id"]: m for m in meta if m["agent_depth"] == 1}
    with_parent = sum(
        home[c] == home.get(m["parent_correlation_id"], "") for c, m in children.items()
    )

    def pick(depth: int, first: bool) -> list[dict[str, Any]]:
        return [r for r in records if r["metadata"]["agent_depth"] == depth
                and (r["metadata"]["turn_index"] == 0) == first]  # fmt: skip

    ttft = [r["metrics"]["time_to_first_token"]["value"] for r in records
            if "time_to_first_token" in r["metrics"]]  # fmt: skip
    load = Counter(m["backend"] for m in meta)
    return {
        "requests (errors)": f"{len(records)} ({sum(1 for r in records if r.get('error'))})",
        "conversations on one engine": f"{sum(len(e) == 1 for e in engines.values())} of "
        f"{len(engines)}",
        "sub-agents on their main agent's engine": f"{with_parent} of {len(children)}",
        "main agent, later turns: prompt cached": share(pick(0, False)),
        "sub-agents' first requests: prompt cached": share(pick(1, True)),
        "sub-agents, later turns: prompt cached": share(pick(1, False)),
        "TTFT p50": f"{statistics.median(ttft):.0f} ms" if ttft else "-",
        "requests per engine": " / ".join(str(load[e]) for e in sorted(load)),
    }


def main() -> None:
    runs = [Path(p) for p in sys.argv[1:]]
    columns = {run.name: column(run) for run in runs}
    print("| | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for row in next(iter(columns.values())):
        print(f"| {row} | " + " | ".join(c[row] for c in columns.values()) + " |")


if __name__ == "__main__":
    main()
