"""The scheduler and worker roles as separate commands over TCP, the way pods run them."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from dagperf import protocol
from dagperf.simulator import running_simulator

from dagfile import conv, encode, turn
from runs import RECORDING, children, free_port, gated_simulator, read_jsonl


def free_address() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


async def spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dagperf", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )  # fmt: skip


async def spawn_scheduler(
    dataset: Path, url: str, address: str, out: Path, *flags: str
) -> asyncio.subprocess.Process:
    common = ["--input-file", str(dataset), "--url", url, "--model", "m", "--bind", address]
    return await spawn("scheduler", *common, "--artifact-dir", str(out), "--quiet", *flags)


async def spawn_worker(address: str, worker_id: str, *flags: str) -> asyncio.subprocess.Process:
    return await spawn("worker", "--scheduler", address, "--worker-id", worker_id, *flags)


async def until_children(pid: int, count: int) -> None:
    async with asyncio.timeout(30):
        while len(children(pid)) < count:
            await asyncio.sleep(0.01)


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "data.dag.jsonl"
    lines = [conv(f"r{i}", turn(forks=[f"c{i}"])) for i in range(8)]
    lines += [conv(f"c{i}", turn(), turn()) for i in range(8)]
    path.write_bytes(b"".join(encode(*lines)))
    return path


async def test_scheduler_and_workers_as_separate_commands(tmp_path, dataset):
    address = free_address()
    async with running_simulator(RECORDING) as sim:
        scheduler = await spawn_scheduler(
            dataset, sim.url, address, tmp_path / "out",
            "--workers-expected", "2", "--concurrency", "4", "--log-format", "json",
        )  # fmt: skip
        workers = await spawn_worker(address, "pod-a", "--processes", "2", "--log-format", "json")
        _, err = await asyncio.wait_for(scheduler.communicate(), 60)
        await asyncio.wait_for(workers.wait(), 30)  # the scheduler shut them down
    assert scheduler.returncode == 0, err.decode()
    assert workers.returncode == 0
    logs = [json.loads(line) for line in err.decode().splitlines()]
    assert any("worker pod-a-1 registered" in e["message"] for e in logs)
    records = read_jsonl(tmp_path / "out" / "profile_export.jsonl")
    assert len(records) == 24
    assert {r["metadata"]["worker_id"] for r in records} == {"pod-a-0", "pod-a-1"}


async def test_a_silent_worker_is_lost_after_the_heartbeat_timeout(tmp_path, dataset):
    address = free_address()
    async with gated_simulator(RECORDING) as (sim, gate):
        scheduler = await spawn_scheduler(
            dataset, sim.url, address, tmp_path / "out",
            "--workers-expected", "2", "--worker-timeout", "1", "--concurrency", "8",
        )  # fmt: skip
        frozen = await spawn_worker(address, "frozen")
        healthy = await spawn_worker(address, "healthy")
        await gate.holding(8)  # every root is in flight, some on each worker
        frozen.send_signal(signal.SIGSTOP)  # alive, but silent
        gate.open()
        try:
            _, err = await asyncio.wait_for(scheduler.communicate(), 60)
        finally:
            frozen.send_signal(signal.SIGCONT)
            frozen.kill()
            await frozen.wait()
        await asyncio.wait_for(healthy.wait(), 30)
    assert scheduler.returncode == 0, err.decode()
    assert "lost worker frozen (no heartbeat for" in err.decode()
    records = read_jsonl(tmp_path / "out" / "profile_export.jsonl")
    lost = [r for r in records if r["error"] and r["error"]["type"] == "WorkerLost"]
    assert lost and {r["metadata"]["worker_id"] for r in lost} == {"frozen"}
    ok = [r for r in records if r["error"] is None]
    assert ok and {r["metadata"]["worker_id"] for r in ok} >= {"healthy"}


async def test_the_scheduler_drops_junk_and_unknown_messages(tmp_path, dataset):
    address = free_address()
    junk = [[b"hello"], [protocol.VERSION, b"\xc1\xc1"], [b"dagperf/9", b"x"]]
    async with running_simulator(RECORDING) as sim:
        scheduler = await spawn_scheduler(dataset, sim.url, address, tmp_path / "out")
        intruder = zmq.Context.instance().socket(zmq.DEALER)
        intruder.setsockopt(zmq.IDENTITY, b"intruder")
        intruder.setsockopt(zmq.LINGER, 0)
        intruder.connect(address)
        for frames in [*junk, protocol.encode(protocol.Results([]))]:  # Results from a stranger
            intruder.send_multipart(frames)
        log = []
        async with asyncio.timeout(30):  # the scheduler says it dropped each bad message
            while sum("dropped a malformed message" in line for line in log) < len(junk):
                log.append((await scheduler.stderr.readline()).decode())
        worker = await spawn_worker(address, "w")
        _, err = await asyncio.wait_for(scheduler.communicate(), 60)
        await asyncio.wait_for(worker.wait(), 30)
        intruder.close()
    assert scheduler.returncode == 0, "".join(log) + err.decode()
    assert len(read_jsonl(tmp_path / "out" / "profile_export.jsonl")) == 24


async def test_a_worker_waits_for_its_scheduler_and_leaves_when_told(tmp_path, dataset):
    address = free_address()
    worker = await spawn_worker(address, "early", "--processes", "2")
    await until_children(worker.pid, 2)  # the worker starts first and keeps saying Hello
    async with running_simulator(RECORDING) as sim:
        out = tmp_path / "out"
        scheduler = await spawn_scheduler(dataset, sim.url, address, out, "--workers-expected", "2")
        _, err = await asyncio.wait_for(scheduler.communicate(), 60)
    assert scheduler.returncode == 0, err.decode()
    assert await asyncio.wait_for(worker.wait(), 30) == 0


async def test_a_worker_stops_on_sigterm():
    worker = await spawn_worker(free_address(), "w", "--processes", "2")
    await until_children(worker.pid, 2)
    worker.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(worker.wait(), 10) == 0


async def test_a_worker_waiting_for_its_scheduler_stops_cleanly_on_sigterm():
    """A worker pod scaled away before its scheduler ever answered."""
    address = free_address()
    silent = zmq.asyncio.Context.instance().socket(zmq.ROUTER)  # hears Hello, never answers
    silent.setsockopt(zmq.LINGER, 0)
    silent.bind(address)
    try:
        worker = await spawn_worker(address, "w")
        frames = await asyncio.wait_for(silent.recv_multipart(), 30)
        assert frames[0] == b"w" and frames[1] == protocol.VERSION  # it said Hello
        worker.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(worker.communicate(), 10)
    finally:
        silent.close()
    assert worker.returncode == 0 and "Traceback" not in err.decode(), err.decode()


async def test_scheduler_registration_timeout_says_what_is_missing(tmp_path, dataset):
    scheduler = await spawn_scheduler(
        dataset, "127.0.0.1:9", free_address(), tmp_path / "out",
        "--workers-expected", "3", "--registration-timeout", "0.5",
    )  # fmt: skip
    _, err = await asyncio.wait_for(scheduler.communicate(), 30)
    assert scheduler.returncode == 1
    assert "only 0 of 3 worker(s) registered within 0 s" in err.decode()
    assert "Traceback" not in err.decode()
