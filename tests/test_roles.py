"""The scheduler and worker roles as separate commands over TCP, the way pods run them, with the
CURVE key set `dagperf keys` makes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq
import zmq.asyncio
from zmq.utils.monitor import recv_monitor_message

from dagperf.simulator import running_simulator
from dagperf.transport import protocol
from dagperf.vocabulary.keys import (
    FILES,
    Gate,
    KeySet,
    load_scheduler_keys,
    load_worker_keys,
    secure_client,
    secure_server,
)
from dagperf.worker import Worker, WorkerConfig

from dagfile import conv, encode, turn
from runs import (
    RECORDING,
    children,
    eventually,
    free_address,
    gated_simulator,
    key_set,
    read_jsonl,
    spawn,
    spawn_scheduler,
    spawn_worker,
)


async def until_children(pid: int, count: int) -> None:
    async with asyncio.timeout(30):
        while len(children(pid)) < count:
            await asyncio.sleep(0.01)


@pytest.fixture
def keys(tmp_path):
    return key_set(tmp_path / "keys")


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "data.dag.jsonl"
    lines = [conv(f"r{i}", turn(forks=[f"c{i}"])) for i in range(8)]
    lines += [conv(f"c{i}", turn(), turn()) for i in range(8)]
    path.write_bytes(b"".join(encode(*lines)))
    return path


async def test_scheduler_and_workers_as_separate_commands(tmp_path, dataset, keys):
    address = free_address()
    async with running_simulator(RECORDING) as sim:
        scheduler = await spawn_scheduler(
            dataset, sim.url, address, tmp_path / "out", keys,
            "--workers-expected", "2", "--concurrency", "4", "--log-format", "json",
        )  # fmt: skip
        workers = await spawn_worker(
            address, "pod-a", keys, sim.url, "--processes", "2", "--log-format", "json"
        )
        _, err = await asyncio.wait_for(scheduler.communicate(), 60)
        await asyncio.wait_for(workers.wait(), 30)  # the scheduler shut them down
    assert scheduler.returncode == 0, err.decode()
    assert workers.returncode == 0
    logs = [json.loads(line) for line in err.decode().splitlines()]
    assert any("worker pod-a-1 registered" in e["message"] for e in logs)
    records = read_jsonl(tmp_path / "out" / "profile_export.jsonl")
    assert len(records) == 24
    assert {r["metadata"]["worker_id"] for r in records} == {"pod-a-0", "pod-a-1"}


async def test_a_silent_worker_is_lost_after_the_heartbeat_timeout(tmp_path, dataset, keys):
    address = free_address()
    async with gated_simulator(RECORDING) as (sim, gate):
        scheduler = await spawn_scheduler(
            dataset, sim.url, address, tmp_path / "out", keys,
            "--workers-expected", "2", "--worker-timeout", "1", "--concurrency", "8",
        )  # fmt: skip
        frozen = await spawn_worker(address, "frozen", keys, sim.url)
        healthy = await spawn_worker(address, "healthy", keys, sim.url)
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


async def test_a_worker_with_the_keys_sending_junk_is_heard_out(tmp_path, dataset, keys):
    """Malformed or unexpected messages from an authenticated peer are dropped, one log line
    each, and the run goes on."""
    address = free_address()
    junk = [[b"hello"], [protocol.VERSION, b"\xc1\xc1"], [b"dagperf/99", b"x"]]
    async with running_simulator(RECORDING) as sim:
        scheduler = await spawn_scheduler(dataset, sim.url, address, tmp_path / "out", keys)
        insider = curve_client(address, keys, b"insider")
        for frames in [*junk, protocol.encode(protocol.Results([]))]:  # Results from a stranger
            insider.send_multipart(frames)
        log = []
        async with asyncio.timeout(30):  # the scheduler says it dropped each bad message
            while sum("dropped a malformed message" in line for line in log) < len(junk):
                log.append((await scheduler.stderr.readline()).decode())
        worker = await spawn_worker(address, "w", keys, sim.url)
        _, err = await asyncio.wait_for(scheduler.communicate(), 60)
        await asyncio.wait_for(worker.wait(), 30)
        insider.close()
    assert scheduler.returncode == 0, "".join(log) + err.decode()
    assert len(read_jsonl(tmp_path / "out" / "profile_export.jsonl")) == 24


def curve_client(address: str | None, keys: Path, identity: bytes) -> zmq.Socket:
    """A DEALER that passes the CURVE handshake with the key set in `keys`, connected to
    `address` (None: not yet, so that a monitor sees every event of the connection)."""
    socket = zmq.Context.instance().socket(zmq.DEALER)
    secure_client(socket, load_worker_keys(keys))
    socket.setsockopt(zmq.IDENTITY, identity)
    socket.setsockopt(zmq.LINGER, 0)
    if address is not None:
        socket.connect(address)
    return socket


async def test_a_peer_without_the_keys_gets_nothing_and_changes_nothing(tmp_path, dataset, keys):
    """A rogue peer on the scheduler's port: with no keys, with a key set of its own, or
    knowing the scheduler's public key but not the workers' secret. It says Hello under the
    live worker's name (a takeover, were it let in) and sends results; it is never answered and
    the run is as if it were not there."""
    address = free_address()
    stranger = key_set(tmp_path / "stranger")
    knows_public = tmp_path / "knows-public"
    key_set(knows_public)
    (knows_public / "scheduler.public").write_text((keys / "scheduler.public").read_text())
    async with gated_simulator(RECORDING) as (sim, gate):
        scheduler = await spawn_scheduler(dataset, sim.url, address, tmp_path / "out", keys)
        worker = await spawn_worker(address, "w", keys, sim.url)
        await gate.holding(1)  # the run is on, with its worker registered
        plain = zmq.Context.instance().socket(zmq.DEALER)
        plain.setsockopt(zmq.IDENTITY, b"w")
        plain.setsockopt(zmq.LINGER, 0)
        plain.connect(address)
        rogues = [plain, curve_client(address, stranger, b"w")]
        rogues.append(curve_client(address, knows_public, b"w"))
        hello = protocol.Hello("w", "rogue", 1, sim.url)
        attack = [protocol.encode(hello), protocol.encode(protocol.Results([]))]
        for rogue in rogues:
            for frames in attack:
                # Never blocking: once the scheduler has refused a rogue's handshake, libzmq
                # may hold no pipe to queue on (a blocking send then waited forever).
                with contextlib.suppress(zmq.Again):
                    rogue.send_multipart(frames, zmq.NOBLOCK)
        gate.open()
        _, err = await asyncio.wait_for(scheduler.communicate(), 60)
        await asyncio.wait_for(worker.wait(), 30)
    answered = [rogue.poll(0) for rogue in rogues]
    for rogue in rogues:
        rogue.close()
    assert scheduler.returncode == 0, err.decode()
    assert answered == [0, 0, 0]  # not a Welcome, not a credit, nothing
    assert "lost worker" not in err.decode() and "restarted" not in err.decode()
    records = read_jsonl(tmp_path / "out" / "profile_export.jsonl")
    assert len(records) == 24 and all(r["error"] is None for r in records)


async def test_an_oversized_message_is_refused_before_it_is_held(tmp_path, dataset, keys):
    """Even a peer with the keys cannot make the scheduler hold a huge frame: libzmq drops the
    connection at the frame's header (MAXMSGSIZE), so its memory does not grow by the frame."""
    address = free_address()
    async with gated_simulator(RECORDING) as (sim, gate):
        scheduler = await spawn_scheduler(dataset, sim.url, address, tmp_path / "out", keys)
        worker = await spawn_worker(address, "w", keys, sim.url)
        await gate.holding(1)
        before = _peak_rss_mb(scheduler.pid)
        insider = curve_client(None, keys, b"insider")
        # Watched before it connects: a handshake done before the monitor was attached is an
        # event the monitor never sees (on a busy machine it often is).
        monitor = insider.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
        insider.connect(address)
        insider.send_multipart([protocol.VERSION, bytes(200 << 20)])
        events = []
        async with asyncio.timeout(30):  # authenticated, then cut off at the frame's header
            while zmq.EVENT_DISCONNECTED not in events:
                if monitor.poll(0):
                    events.append(recv_monitor_message(monitor)["event"])
                else:
                    await asyncio.sleep(0.01)
        grown = _peak_rss_mb(scheduler.pid) - before
        insider.disable_monitor()
        monitor.close()
        insider.close()
        gate.open()
        _, err = await asyncio.wait_for(scheduler.communicate(), 60)
        await asyncio.wait_for(worker.wait(), 30)
    assert zmq.EVENT_HANDSHAKE_SUCCEEDED in events
    assert grown < 50, f"the scheduler's peak memory grew by {grown:.0f} MB"
    assert scheduler.returncode == 0, err.decode()
    assert len(read_jsonl(tmp_path / "out" / "profile_export.jsonl")) == 24


def _peak_rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024


async def test_a_worker_for_another_server_is_refused(tmp_path, dataset, keys):
    """Where requests go is the worker's own setting; one that disagrees with the run's
    server is told why and never given work."""
    address = free_address()
    async with running_simulator(RECORDING) as sim:
        scheduler = await spawn_scheduler(dataset, sim.url, address, tmp_path / "out", keys)
        stray = await spawn_worker(address, "stray", keys, "http://127.0.0.1:9")
        _, stray_err = await asyncio.wait_for(stray.communicate(), 30)
        worker = await spawn_worker(address, "w", keys, sim.url)
        _, err = await asyncio.wait_for(scheduler.communicate(), 60)
        await asyncio.wait_for(worker.wait(), 30)
    assert "refused worker stray: it sends to http://127.0.0.1:9" in err.decode()
    assert "the run measures" in stray_err.decode()
    records = read_jsonl(tmp_path / "out" / "profile_export.jsonl")
    assert {r["metadata"]["worker_id"] for r in records} == {"w"}


async def test_a_worker_waits_for_its_scheduler_and_leaves_when_told(tmp_path, dataset, keys):
    address = free_address()
    async with running_simulator(RECORDING) as sim:
        worker = await spawn_worker(address, "early", keys, sim.url, "--processes", "2")
        await until_children(worker.pid, 2)  # the worker starts first and keeps saying Hello
        out = tmp_path / "out"
        scheduler = await spawn_scheduler(
            dataset, sim.url, address, out, keys, "--workers-expected", "2"
        )
        _, err = await asyncio.wait_for(scheduler.communicate(), 60)
    assert scheduler.returncode == 0, err.decode()
    assert await asyncio.wait_for(worker.wait(), 30) == 0


async def test_a_worker_stops_on_sigterm(keys):
    worker = await spawn_worker(free_address(), "w", keys, "http://127.0.0.1:9", "--processes", "2")
    await until_children(worker.pid, 2)
    worker.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(worker.wait(), 60) == 0


async def test_a_worker_waiting_for_its_scheduler_stops_cleanly_on_sigterm(keys):
    """A worker pod scaled away before its scheduler ever answered."""
    address = free_address()
    silent = zmq.asyncio.Context.instance().socket(zmq.ROUTER)  # hears Hello, never answers
    secure_server(silent, load_scheduler_keys(keys))
    silent.setsockopt(zmq.LINGER, 0)
    silent.bind(address)
    try:
        worker = await spawn_worker(address, "w", keys, "http://127.0.0.1:9")
        frames = await asyncio.wait_for(silent.recv_multipart(), 30)
        assert frames[0] == b"w" and frames[1] == protocol.VERSION  # it said Hello
        worker.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(worker.communicate(), 60)
    finally:
        silent.close()
    assert worker.returncode == 0 and "Traceback" not in err.decode(), err.decode()


async def test_scheduler_registration_timeout_says_what_is_missing(tmp_path, dataset, keys):
    scheduler = await spawn_scheduler(
        dataset, "127.0.0.1:9", free_address(), tmp_path / "out", keys,
        "--workers-expected", "3", "--registration-timeout", "0.5",
    )  # fmt: skip
    _, err = await asyncio.wait_for(scheduler.communicate(), 30)
    assert scheduler.returncode == 1
    assert "only 0 of 3 worker(s) registered within 0 s" in err.decode()
    assert "Traceback" not in err.decode()


@pytest.mark.parametrize("role", ["scheduler", "worker"])
async def test_a_role_without_keys_says_how_to_make_them(tmp_path, dataset, role):
    flags = {
        "scheduler": ["--input-file", str(dataset), "--url", "127.0.0.1:9", "--model", "m"],
        "worker": ["--scheduler", free_address(), "--url", "127.0.0.1:9"],
    }[role]
    env = {k: v for k, v in os.environ.items() if k != "DAGPERF_KEYS"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dagperf", role, *flags, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    assert "--keys DIR is required (make a key set with `dagperf keys DIR`)" in err.decode()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "worker.public").write_text("not a key")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dagperf", role, *flags, "--keys", str(tmp_path / "bad"), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2 and "Traceback" not in err.decode()
    assert f"--keys: cannot read key file {tmp_path / 'bad'}" in err.decode() or (
        "does not hold a Z85 CURVE key" in err.decode()
    )


async def test_dagperf_keys_writes_a_private_key_set_once(tmp_path):
    target = tmp_path / "k"
    first = await spawn("keys", str(target))
    await asyncio.wait_for(first.communicate(), 30)
    assert first.returncode == 0
    assert target.stat().st_mode & 0o777 == 0o700
    assert {p.name: p.stat().st_mode & 0o777 for p in target.iterdir()} == dict.fromkeys(
        FILES, 0o600
    )
    secret = (target / "worker.secret").read_text()
    again = await spawn("keys", str(target))
    _, err = await asyncio.wait_for(again.communicate(), 30)
    assert again.returncode == 1 and "--force replaces them" in err.decode()
    assert (target / "worker.secret").read_text() == secret  # nothing was replaced
    assert load_scheduler_keys(target).worker_public == load_worker_keys(target).public


def test_heartbeats_keep_flowing_while_the_workers_loop_is_busy():
    """A worker starting a huge fan-out keeps its event loop busy for seconds; its heartbeats
    come from a thread and socket of their own, so the scheduler still hears it. Here the
    worker's loop spins for a second, holding the GIL as busy Python code does, while the test
    plays the scheduler and counts the heartbeats that arrive meanwhile."""
    keys = KeySet.generate()
    context = zmq.Context.instance()
    gate = Gate(context, keys.scheduler)
    router = context.socket(zmq.ROUTER)
    secure_server(router, keys.scheduler)
    router.setsockopt(zmq.LINGER, 0)
    address = f"tcp://127.0.0.1:{router.bind_to_random_port('tcp://127.0.0.1')}"
    worker = Worker(WorkerConfig(address, "w", keys.worker, "http://127.0.0.1:9"))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(worker.run(),))
    thread.start()
    busy: list[float] = []

    def spin(seconds: float) -> None:
        busy.append(time.monotonic())
        while time.monotonic() < busy[0] + seconds:
            pass
        busy.append(time.monotonic())

    try:
        assert router.poll(30_000)
        identity, *frames = router.recv_multipart()
        assert isinstance(protocol.decode(frames), protocol.Hello)
        settings = protocol.WorkerSettings("chat", False, 1.0, ())
        router.send_multipart([identity, *protocol.encode(protocol.Welcome(settings, 0.05))])
        heard: list[float] = []
        while len(busy) < 2 or heard[-1] < busy[1]:
            assert router.poll(10_000), "no heartbeat within 10 s"
            sender, *frames = router.recv_multipart()
            message = protocol.decode(frames)
            if isinstance(message, protocol.Heartbeat):
                assert (sender, message.worker_id) == (b"w/heartbeat", "w")
                heard.append(time.monotonic())
                if len(heard) == 1:  # welcomed and beating: now keep its loop busy
                    loop.call_soon_threadsafe(spin, 1.0)
    finally:
        loop.call_soon_threadsafe(worker.stop)
        thread.join(10)
        router.close()
        gate.close()
    during = [t for t in heard if busy[0] <= t <= busy[1]]
    assert len(during) >= 5, f"{len(during)} heartbeats in the busy second"


async def test_a_worker_counts_with_the_schedulers_tokenizer_without_the_file(tmp_path, keys):
    """--tokenizer names a file on the scheduler's host; workers run in other pods, where the
    path does not exist: the scheduler sends the tokenizer itself, so they count with it."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from dagperf.dataset.text import VOCABULARY

    vocab = {"[UNK]": 0} | {w: i + 1 for i, w in enumerate(sorted(set(VOCABULARY)))}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    only_here = tmp_path / "scheduler-host"
    only_here.mkdir()
    tokenizer.save(str(only_here / "tokenizer.json"))
    dataset = tmp_path / "data.dag.jsonl"
    dataset.write_bytes(b"".join(encode(conv("r0"), conv("r1"))))
    address = free_address()
    port = int(address.rsplit(":", 1)[1])
    async with running_simulator(RECORDING.model_copy(update={"usage": False})) as sim:
        scheduler = await spawn_scheduler(
            dataset, sim.url, address, tmp_path / "out", keys, "--streaming",
            "--tokenizer", str(only_here),
        )  # fmt: skip
        await eventually(lambda: _accepts(port), bool)  # bound: the tokenizer was read before
        (only_here / "tokenizer.json").unlink()
        only_here.rmdir()
        worker = await spawn_worker(address, "pod-b", keys, sim.url)
        _, err = await asyncio.wait_for(scheduler.communicate(), 60)
        await asyncio.wait_for(worker.wait(), 30)
    assert scheduler.returncode == 0, err.decode()
    records = read_jsonl(tmp_path / "out" / "profile_export.jsonl")
    assert [r["metadata"]["token_count_source"] for r in records] == ["tokenizer", "tokenizer"]


async def _accepts(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True
