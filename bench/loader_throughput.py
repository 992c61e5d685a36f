"""Loader and graph-compiler throughput on a generated dag_jsonl file, and the memory they take.

    python bench/loader_throughput.py [--conversations 100000]

Prints lines/s and MB/s for loading (parse and validate every line, then the whole-file rules),
the compile time into the request graph, and the peak memory of each: traced Python allocations
(tracemalloc, in a second pass, since tracing slows the code down) and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import tempfile
import time
import tracemalloc
from pathlib import Path

from dagperf.dataset.formats.dag_jsonl import load_dag_jsonl
from dagperf.graph import compile_dag_jsonl

WORDS = "plan the next step and explain which branch of the analysis should run first".split()


def write_dataset(path: Path, conversations: int) -> None:
    """Trees of four conversations: a root that spawns an agent, joins it, then forks twice."""

    def text(i: int) -> str:
        return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(40))

    def msg(i: int, role: str = "user") -> dict:
        return {"role": role, "content": text(i)}

    with path.open("w") as f:
        for t in range(conversations // 4):
            root, agent, a, b = (f"t{t}-{name}" for name in ("root", "agent", "a", "b"))
            lines = [
                {
                    "session_id": root,
                    "turns": [
                        {
                            "messages": [msg(t, "system"), msg(t + 1)],
                            "max_tokens": 64,
                            "spawns": [{"children": [agent], "join_at": 1}],
                        },
                        {"messages": [msg(t + 2)], "forks": [a, b], "extra": {"temperature": 0.2}},
                    ],
                },
                {"session_id": agent, "turns": [{"messages": [msg(t + 3, "system"), msg(t + 4)]}]},
                {
                    "session_id": a,
                    "turns": [{"messages": [msg(t + 5)]}, {"messages": [msg(t + 6)]}],
                },
                {
                    "session_id": b,
                    "turns": [{"messages": [msg(t + 7)]}, {"messages": [msg(t + 8)]}],
                },
            ]
            for line in lines:
                f.write(json.dumps(line) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.dag.jsonl"
        write_dataset(path, args.conversations)
        size_mb = path.stat().st_size / 1e6

        gc.collect()
        start = time.perf_counter()
        dataset = load_dag_jsonl(path)
        loaded = time.perf_counter()
        graph = compile_dag_jsonl(dataset)
        compiled = time.perf_counter()
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        lines = len(dataset.ids)
        del dataset, graph
        gc.collect()

        tracemalloc.start()
        dataset = load_dag_jsonl(path)
        load_peak = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.reset_peak()
        graph = compile_dag_jsonl(dataset)
        compile_peak = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.stop()

    load_s, compile_s = loaded - start, compiled - loaded
    print(f"file                {lines:,} conversations, {size_mb:.1f} MB")
    rate = f"{lines / load_s:,.0f} lines/s  {size_mb / load_s:.1f} MB/s"
    print(f"load                {load_s:.2f} s  {rate}")
    print(
        f"compile             {compile_s:.2f} s  {graph.request_count:,} requests in "
        f"{graph.root_count:,} trees  {graph.request_count / compile_s:,.0f} requests/s"
    )
    print(f"peak traced memory  load {load_peak:.0f} MB, load + graph {compile_peak:.0f} MB")
    print(f"peak process RSS    {rss_mb:.0f} MB")


if __name__ == "__main__":
    main()
