"""The scheduler's own work per request, without sockets, workers or an endpoint in the way.

    python bench/scheduler_path.py [--requests 20000] [--concurrency 64] [--forks 0]
    valgrind --tool=callgrind --callgrind-out-file=/dev/null python bench/scheduler_path.py

A real `Scheduler` is driven by hand in one process: two workers say Hello through its message
handler, then every Credits message it sends is answered at once with a Results message built
from a result a real worker sent (recorded from a run against bench/endpoint.py, times and
credit replaced). So each request takes the path it takes in a run (decode, dispatcher,
outbox, every summary, the records files), and nothing else: no ZeroMQ, no HTTP, no workers.

Prints microseconds per request over the whole loop (start-up excluded). This machine's timings
wander by a fifth; under valgrind the instruction count does not, so a change to the request
path is best weighed as instructions per request against a baseline's, on the same dataset.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

import msgspec

from dagperf.apis.endpoint_config import EndpointConfig
from dagperf.exports.run import Artifacts
from dagperf.scheduler.options import SchedulerOptions
from dagperf.scheduler.shell import Scheduler
from dagperf.sources import load_graph
from dagperf.transport import protocol
from dagperf.vocabulary.config import LoadConfig
from dagperf.vocabulary.keys import KeySet
from tools import dataset

URL = "http://127.0.0.1:9"
WORKERS = ("w0", "w1")
BATCH = 32  # results per Results message: what a worker's event-loop pass gathers under load

# A worker's result for a streamed 16-token reply from bench/endpoint.py, as it sent it.
TEMPLATE = protocol.Result(
    credit=0,
    start_ns=0,
    ack_ns=0,
    end_ns=0,
    metrics={
        "request_latency": 0.640872,
        "usage_prompt_tokens": 8,
        "usage_completion_tokens": 16,
        "output_sequence_length": 16,
        "input_sequence_length": 8,
        "time_to_first_token": 0.534034,
        "time_to_second_token": 0.0,
        "inter_chunk_latency": [0.0] * 15,
        "inter_token_latency": 0.0071225,
        "output_token_throughput_per_user": 140399.48,
    },
    token_source="usage",
    backend="127.0.0.1:41765",
    backend_source="connection",
    finish_reason="length",
)


class Wire:
    """The scheduler's socket: what it sends is kept, per worker, to be answered."""

    def __init__(self) -> None:
        self.credits: deque[tuple[bytes, protocol.Credit]] = deque()

    def send(self, frames: list[bytes]) -> None:
        message = protocol.decode(frames[1:])
        if isinstance(message, protocol.Credits):
            self.credits.extend((frames[0], c) for c in message.items)

    def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


def answer(credit: protocol.Credit, now: int) -> protocol.Result:
    return msgspec.structs.replace(
        TEMPLATE, credit=credit.id, start_ns=now, ack_ns=now + 500_000, end_ns=now + 640_000
    )


async def drive(scheduler: Scheduler, wire: Wire) -> tuple[int, float]:
    scheduler._channel = wire  # type: ignore[assignment]
    scheduler.endpoint_url = "inproc://bench"
    for name in WORKERS:
        hello = protocol.Hello(name, "i-" + name, 1, URL)
        scheduler._on_message([name.encode(), *protocol.encode(hello)])
    scheduler.output.open(scheduler.graph, scheduler.endpoint)
    scheduler.dispatcher.begin()
    scheduler._flush()
    started, answered = time.perf_counter(), 0
    while wire.credits and not scheduler.dispatcher.finished:
        by_worker: dict[bytes, list[protocol.Result]] = {}
        now = time.time_ns()
        for _ in range(min(BATCH * len(WORKERS), len(wire.credits))):
            worker, credit = wire.credits.popleft()
            by_worker.setdefault(worker, []).append(answer(credit, now))
        for worker, results in by_worker.items():
            answered += len(results)
            scheduler._on_message([worker, *protocol.encode(protocol.Results(results))])
    elapsed = time.perf_counter() - started
    scheduler._timers.cancel()
    await scheduler.output.close()
    return answered, elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--forks", type=int, default=0, help="FORK children per conversation")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data = dataset(Path(tmp) / "data.jsonl", 64, args.forks)
        graph = load_graph(data, "dag_jsonl")
        endpoint = EndpointConfig(url=URL, model="m", endpoint_type="chat", streaming=True)
        load = LoadConfig(concurrency=args.concurrency, request_count=args.requests)
        options = SchedulerOptions(KeySet.generate().scheduler, "inproc://unused", len(WORKERS))
        artifacts = Artifacts(Path(tmp) / "out", {})
        scheduler = Scheduler(graph, endpoint, load, artifacts, options)
        answered, elapsed = asyncio.run(drive(scheduler, Wire()))
    if answered < args.requests:
        sys.exit(f"only {answered} of {args.requests} requests were answered")
    per_request_us = 1e6 * elapsed / answered
    print(f"{answered:,} requests: {per_request_us:.1f} us of the scheduler's own per request")


if __name__ == "__main__":
    main()
