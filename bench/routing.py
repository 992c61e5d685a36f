"""The scheduler's own ceiling: routing and dispatch decisions, with no network in the way.

The dispatcher runs in this process against many simulated workers that answer every credit at
once (starting whatever was armed with it, as real workers do); each round's credits are encoded
into per-worker Credits messages as the scheduler sends them. What comes out is requests/s the
scheduler could feed if workers and the server cost nothing.
"""

from __future__ import annotations

import io
import json
import time

from dagperf.dataset.formats.dag_jsonl import read_dag_jsonl
from dagperf.engine import Dispatcher, Flight
from dagperf.graph import compile_dag_jsonl
from dagperf.transport import protocol
from dagperf.vocabulary.config import LoadConfig


def _graph(roots: int, forks: int):
    lines = []
    for r in range(roots):
        kids = [f"r{r}-f{k}" for k in range(forks)]
        lines.append(
            {
                "session_id": f"r{r}",
                "turns": [{"messages": [{"role": "user", "content": f"q{r}"}], "forks": kids}],
            }
        )
        turn = {"messages": [{"role": "user", "content": "x"}]}
        lines += [{"session_id": kid, "turns": [turn, turn]} for kid in kids]
    data = io.BytesIO("".join(json.dumps(line) + "\n" for line in lines).encode())
    return compile_dag_jsonl(read_dag_jsonl(data, "routing"))


def _credit(flight: Flight) -> protocol.Credit:
    node = flight.run.tree.nodes[flight.node]
    return protocol.Credit(
        flight.credit,
        flight.run.id,
        flight.node,
        -1,
        0,
        node.payload.messages_json,
        {"model": "m"},
        flight.request_id,
        "c",
        "k",
        tuple(_credit(a) for a in flight.armed),
    )


def routing_throughput(workers: int, requests: int = 200_000, roots: int = 256) -> float:
    graph = _graph(roots=roots, forks=4)
    load = LoadConfig(concurrency=1024, num_conversations=10**9)
    dispatcher = Dispatcher(graph, load, time.monotonic)
    for w in range(workers):
        dispatcher.add_worker(f"pod-{w}")
    dispatcher.begin()
    done = 0
    flying: list[Flight] = []
    start = time.perf_counter()
    while done < requests:
        sends = dispatcher.orders.drain_sends()
        batches: dict[str, list[protocol.Credit]] = {}
        for flight in sends:
            batches.setdefault(flight.worker, []).append(_credit(flight))
        for credits in batches.values():
            protocol.encode(protocol.Credits(credits))
        flying += sends
        answered, flying = flying, []
        for flight in answered:
            armed = list(flight.armed)
            dispatcher.complete(flight.credit, True, False, [a.credit for a in armed])
            flying += armed  # started by the worker: answered next round
            done += 1
    return done / (time.perf_counter() - start)
