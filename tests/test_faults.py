"""Faults end cleanly: children die with a killed parent, a signal to the process group is an
orderly stop, a write error is one line and leaves valid records, an unwritable artifact
directory or an unsendable API key is refused before anything starts, registration outlives a
lost worker, and a worker without its scheduler says so. Every part is real: processes,
signals, resource limits, a tmpfs where the machine allows mounting one."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import subprocess
import sys

import pytest
from aiohttp import web

from dagperf.simulator import SimConfig, running_simulator

from dagfile import conv, encode
from runs import (
    RECORDING,
    alive,
    children,
    dagperf_processes,
    finish,
    free_address,
    key_set,
    read_jsonl,
    serving,
    spawn_scheduler,
    spawn_worker,
    start_profile,
)

SLOW = SimConfig(ttft_ms=20, itl_ms=5, output_tokens=20)


async def until(condition, seconds: float = 30) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.02)


def many(count: int) -> list:
    return [conv(f"r{i}") for i in range(count)]


async def test_children_die_with_a_profile_killed_outright(tmp_path):
    process, _ = await start_profile_with_simulator(tmp_path, many(5000), "--workers", "2")
    await until(lambda: len(children(process.pid)) == 3)  # the simulator and two workers
    spawned = children(process.pid)
    process.kill()  # SIGKILL: nothing of it runs to stop them
    await process.wait()
    await until(lambda: not any(alive(pid) for pid in spawned))


async def start_profile_with_simulator(tmp_path, lines, *flags: str, **spawn):
    """`dagperf profile` with its built-in simulator (a child process), slowed down."""
    dataset = tmp_path / "data.dag.jsonl"
    dataset.write_bytes(b"".join(encode(*lines)))
    out = tmp_path / "out"
    command = ["-m", "dagperf", "profile", "--input-file", str(dataset), "--artifact-dir", str(out)]
    command += ["--quiet", "--sim-ttft-ms", "20", "--sim-itl-ms", "5", *flags]
    process = await asyncio.create_subprocess_exec(
        sys.executable, *command,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, **spawn,
    )  # fmt: skip
    return process, out


async def test_sigterm_to_the_process_group_is_an_orderly_stop(tmp_path):
    async with running_simulator(SLOW) as sim:
        process, directory = await start_profile(
            sim.url, tmp_path, many(2000), "--workers", "2", "--concurrency", "4",
            start_new_session=True,
        )  # fmt: skip
        await until(lambda: len(sim.simulator.records) >= 8)
        os.killpg(process.pid, signal.SIGTERM)  # as `timeout`, a terminal or a runtime does
        run = await finish(process, directory, sim)
    assert run.returncode == 130, run.stderr
    assert "run failed" not in run.stderr and "Traceback" not in run.stderr
    assert run.summary is not None and run.summary["was_cancelled"] is True
    assert 8 <= len(run.records) < 2000
    assert not any(r["error"] and r["error"]["type"] == "WorkerLost" for r in run.records)


def file_size_limit(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


async def test_a_write_error_ends_the_run_with_one_line_and_valid_records(tmp_path):
    async with running_simulator(RECORDING) as sim:
        # Python ignores SIGXFSZ: past the limit, writes fail with EFBIG, as on a full disk.
        process, directory = await start_profile(
            sim.url, tmp_path, many(10), "--num-conversations", "3000", "--concurrency", "64",
            preexec_fn=file_size_limit(256 * 1024),
        )  # fmt: skip
        run = await finish(process, directory, sim, timeout=120)
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr
    failed = [line for line in run.stderr.splitlines() if "cannot write" in line]
    assert failed == [
        f"dagperf: the run failed: cannot write {directory / 'profile_export.jsonl'}: "
        "File too large"
    ]
    text = (directory / "profile_export.jsonl").read_bytes()
    assert text.endswith(b"\n") and len(text) <= 256 * 1024
    assert 0 < len(read_jsonl(directory / "profile_export.jsonl")) < 3000  # every line whole
    assert run.summary is not None and run.summary["was_cancelled"] is True


@pytest.fixture
def small_tmpfs(tmp_path):
    mount = tmp_path / "full"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", str(mount)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


async def test_a_full_disk_ends_the_run_with_one_line_and_valid_records(tmp_path, small_tmpfs):
    directory = small_tmpfs / "out"
    async with running_simulator(RECORDING) as sim:
        process, _ = await start_profile(sim.url, tmp_path, many(10), "--num-conversations",
                                         "3000", "--concurrency", "64", "--artifact-dir",
                                         str(directory))  # fmt: skip
        run = await finish(process, directory, sim, timeout=120)
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr
    assert "No space left on device" in run.stderr
    assert 0 < len(read_jsonl(directory / "profile_export.jsonl")) < 3000


async def test_an_unwritable_artifact_directory_is_refused_before_anything_starts(tmp_path):
    asked = []

    async def chat(request: web.Request) -> web.Response:
        asked.append(request.path)
        return web.json_response({"choices": [{"message": {"content": "x"}}]})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", chat)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    async with serving(app) as url:
        process, _ = await start_profile(url, tmp_path, many(3), "--artifact-dir",
                                         str(blocker / "out"))  # fmt: skip
        run = await finish(process, blocker / "out", None)
    assert run.returncode == 2
    assert f"--artifact-dir: cannot write to {blocker / 'out'}: Not a directory" in run.stderr
    assert asked == []  # no request, not even the model lookup, went out


KEY = "sk-live-0123456789\r\nX-Injected: yes"


async def test_an_api_key_with_a_line_break_is_refused_at_start_and_never_printed(tmp_path):
    env = os.environ | {"OPENAI_API_KEY": KEY}
    async with running_simulator(RECORDING) as sim:
        process, directory = await start_profile(sim.url, tmp_path, many(2), env=env)
        run = await finish(process, directory, sim)
    assert run.returncode == 2
    assert "the API key holds a control character" in run.stderr
    assert "0123456789" not in run.stderr + run.stdout
    assert sim.simulator.records == type(sim.simulator.records)()
    keys = key_set(tmp_path / "keys")
    worker = subprocess.run(
        [sys.executable, "-m", "dagperf", "worker", "--scheduler", free_address(), "--keys",
         str(keys), "--url", sim.url],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert worker.returncode == 2
    assert "OPENAI_API_KEY: the API key holds a control character" in worker.stderr
    assert "0123456789" not in worker.stderr + worker.stdout


async def lines_of(stream: asyncio.StreamReader, seen: list[str]) -> None:
    while line := await stream.readline():
        seen.append(line.decode())


async def test_registration_outlives_a_worker_lost_before_the_run_began(tmp_path):
    keys = key_set(tmp_path / "keys")
    dataset = tmp_path / "data.dag.jsonl"
    dataset.write_bytes(b"".join(encode(*many(20))))
    address = free_address()
    async with running_simulator(RECORDING) as sim:
        scheduler = await spawn_scheduler(
            dataset, sim.url, address, tmp_path / "out", keys,
            "--workers-expected", "2", "--worker-timeout", "1",
        )  # fmt: skip
        log: list[str] = []
        reading = asyncio.ensure_future(lines_of(scheduler.stderr, log))
        doomed = await spawn_worker(address, "doomed", keys, sim.url)
        await until(lambda: any("worker doomed registered" in line for line in log))
        doomed.kill()
        await doomed.wait()
        await until(lambda: any("lost worker doomed" in line for line in log))
        late = [await spawn_worker(address, name, keys, sim.url) for name in ("b", "c")]
        await asyncio.wait_for(scheduler.wait(), 60)
        await reading
        for worker in late:
            await asyncio.wait_for(worker.wait(), 30)
    assert scheduler.returncode == 0, "".join(log)
    records = read_jsonl(tmp_path / "out" / "profile_export.jsonl")
    assert len(records) == 20 and all(r["error"] is None for r in records)
    assert {r["metadata"]["worker_id"] for r in records} <= {"b", "c"}


async def test_a_worker_says_it_is_waiting_for_its_scheduler(tmp_path):
    keys = key_set(tmp_path / "keys")
    address = free_address()  # nothing listens there
    worker = await spawn_worker(address, "lonely", keys, "http://127.0.0.1:1")
    log: list[str] = []
    reading = asyncio.ensure_future(lines_of(worker.stderr, log))
    try:
        await until(lambda: any(f"waiting for the scheduler at {address}" in x for x in log), 20)
    finally:
        worker.send_signal(signal.SIGTERM)
        await asyncio.wait_for(worker.wait(), 30)
        await reading
    assert worker.returncode == 0, "".join(log)


@pytest.fixture(autouse=True)
def nothing_left_behind():
    before = dagperf_processes()
    yield
    assert dagperf_processes() <= before
