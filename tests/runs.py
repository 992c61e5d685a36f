"""Run `dagperf profile` as a user does, against a recording simulator, and read what it did.

The simulator runs in the test's event loop (so the test sees every body, header and timing it
received); dagperf runs as real processes: the profile driver, its workers, ZeroMQ between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from dagperf.simulator import RunningSimulator, SimConfig, SimRecord, Simulator
from dagperf.vocabulary.keys import KeySet

from dagfile import encode

RECORDING = SimConfig(ttft_ms=2, itl_ms=0.5, output_tokens=4, record_bodies=True)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    directory: Path
    records: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    served: dict[str, SimRecord] = field(default_factory=dict)  # by X-Request-ID

    def named(self, name: str) -> list[dict[str, Any]]:
        """Records of "conversation:turn", in send order."""
        conversation, turn = name.rsplit(":", 1)
        return sorted(
            (
                r
                for r in self.records
                if r["metadata"]["conversation_id"] == conversation
                and r["metadata"]["turn_index"] == int(turn)
            ),
            key=lambda r: r["metadata"]["session_num"],
        )

    def one(self, name: str) -> dict[str, Any]:
        (found,) = self.named(name)
        return found

    def body(self, name: str) -> dict[str, Any]:
        return self.server(name).body

    def server(self, name: str) -> SimRecord:
        return self.served[self.one(name)["metadata"]["x_request_id"]]

    def reply(self, name: str) -> dict[str, str]:
        """The assistant message a later turn should carry for this one."""
        return {"role": "assistant", "content": self.server(name).reply}

    @property
    def branch_stats(self) -> dict[str, int]:
        assert self.summary is not None
        return self.summary["branch_stats"]

    def sent_order(self) -> list[str]:
        ordered = sorted(self.records, key=lambda r: r["metadata"]["session_num"])
        return [
            f"{r['metadata']['conversation_id']}:{r['metadata']['turn_index']}" for r in ordered
        ]


async def start_profile(
    url: str,
    tmp_path: Path,
    lines: list,
    *flags: str,
    env: dict[str, str] | None = None,
    **spawn: Any,
) -> tuple[asyncio.subprocess.Process, Path]:
    """Start `dagperf profile` on a dataset; returns the process and its artifact directory.
    `spawn` goes to the process's creation (a session of its own, a resource limit)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    dataset = tmp_path / "data.dag.jsonl"
    dataset.write_bytes(b"".join(encode(*lines)))
    directory = tmp_path / "artifacts"
    command = ["-m", "dagperf", "profile", "--input-file", str(dataset), "--url", url]
    command += ["--artifact-dir", str(directory), "--quiet", *flags]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=(env or dict(os.environ)) | {"PYTHONUNBUFFERED": "1"},
        **spawn,
    )
    return process, directory


async def profile(
    sim: RunningSimulator, tmp_path: Path, lines: list, *flags: str, timeout: float = 60
) -> Run:
    process, directory = await start_profile(sim.url, tmp_path, lines, *flags)
    return await finish(process, directory, sim, timeout)


async def finish(
    process: asyncio.subprocess.Process,
    directory: Path,
    sim: RunningSimulator | None,
    timeout: float = 60,
) -> Run:
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
    run = Run(process.returncode, stdout.decode(), stderr.decode(), directory)
    records_file = directory / "profile_export.jsonl"
    if records_file.exists():
        run.records = read_jsonl(records_file)
    summary_file = directory / "profile_export_aiperf.json"
    if summary_file.exists():
        run.summary = json.loads(summary_file.read_text())
    if sim is not None:
        run.served = {r.request_id: r for r in sim.simulator.records if r.request_id}
    return run


def free_port() -> int:
    """A loopback port nothing listens on (until something binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the scheduler and worker roles as separate commands ------------------------------------


def free_address() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


@contextlib.contextmanager
def file_server(directory: Path) -> Iterator[str]:
    """Python's own file server on loopback, serving `directory`; yields its URL."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
         "--directory", str(directory)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None and "Serving HTTP" in server.stdout.readline()
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=60)


async def spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dagperf", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )  # fmt: skip


async def spawn_scheduler(
    dataset: Path, url: str, address: str, out: Path, keys: Path, *flags: str
) -> asyncio.subprocess.Process:
    common = ["--input-file", str(dataset), "--url", url, "--model", "m", "--bind", address]
    common += ["--keys", str(keys), "--artifact-dir", str(out), "--quiet"]
    # Not the role's 9090 on every address: a free port on loopback, so that schedulers of
    # tests running side by side (pytest -n, another checkout's suite) do not meet. A test
    # that reads /status names its own port in `flags`, which come later and win.
    common += ["--metrics-host", "127.0.0.1", "--metrics-port", "0"]
    return await spawn("scheduler", *common, *flags)


async def spawn_worker(
    address: str, worker_id: str, keys: Path, url: str, *flags: str
) -> asyncio.subprocess.Process:
    common = ["--scheduler", address, "--worker-id", worker_id, "--keys", str(keys)]
    return await spawn("worker", *common, "--url", url, *flags)


@contextlib.asynccontextmanager
async def serving(app: web.Application, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Serve an aiohttp app on a free port of `host` (loopback); yields its base URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, 0).start()
        yield f"http://{host}:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


class Gate:
    """Holds every completion request at the server until opened: a test decides when the
    requests in flight may finish, instead of racing them."""

    def __init__(self) -> None:
        self.held = 0
        self._open = asyncio.Event()
        self._arrived = asyncio.Condition()

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method == "POST" and request.path.startswith("/v1/"):
            async with self._arrived:
                self.held += 1
                self._arrived.notify_all()
            await self._open.wait()
        return await handler(request)

    async def holding(self, count: int, timeout: float = 60) -> None:
        """Wait until `count` requests have arrived (held or, once open, let through)."""
        async with asyncio.timeout(timeout), self._arrived:
            await self._arrived.wait_for(lambda: self.held >= count)

    def open(self) -> None:
        self._open.set()


@contextlib.asynccontextmanager
async def gated_simulator(
    config: SimConfig, host: str = "127.0.0.1"
) -> AsyncIterator[tuple[RunningSimulator, Gate]]:
    """A simulator on `host` behind a closed `Gate`."""
    gate = Gate()
    simulator = Simulator(config)
    app = simulator.app()
    app.middlewares.append(gate.middleware)
    async with serving(app, host) as url:
        yield RunningSimulator(simulator, url), gate


def key_set(directory: Path) -> Path:
    """A key set as `dagperf keys` writes one, for roles started by hand."""
    KeySet.generate().write(directory)
    return directory


def control_token(keys: Path) -> dict[str, str]:
    """The header POST /stop needs, from a key set."""
    return {"Authorization": f"Bearer {(keys / 'control.token').read_text().strip()}"}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def children(pid: int) -> list[int]:
    """Processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Running: not gone, nor a zombie that this session (their subreaper) has yet to reap."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def connected_to(pid: int, port: int) -> int:
    """How many TCP connections process `pid` holds to `port` (from /proc: the process's socket
    inodes against its network namespace's table of IPv4 TCP sockets)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
            count += 1
    return count


def dagperf_processes() -> set[int]:
    """Every live `python -m dagperf ...` process this test session started, however far down
    (the session is its descendants' subreaper, see conftest.py, so orphans stay in its tree);
    a suite running beside this one has its own."""
    found = set()
    for pid in descendants(os.getpid()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"-m\x00dagperf\x00" in cmdline and state != "Z":  # a zombie has exited
            found.add(pid)
    return found


def descendants(pid: int) -> set[int]:
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def check_dependencies_finished_first(run: Run) -> None:
    """No request left before every request it depends on had finished, plus its delay;
    checked on dagperf's clock and on the server's."""
    by_id = {r["metadata"]["x_request_id"]: r["metadata"] for r in run.records}
    for r in run.records:
        m = r["metadata"]
        # issued before it started (with its parent, if it was armed), never unknown
        assert 0 < m["credit_issued_ns"] <= m["request_start_ns"], m
        for dep in m["depends_on"]:
            assert by_id[dep]["request_end_ns"] <= m["request_start_ns"], (m, by_id[dep])
            served_dep, served = run.served[dep], run.served[m["x_request_id"]]
            waited = served.received_ns - served_dep.end_ns
            assert waited >= m["delay_ms"] * 1e6, (m, waited)


async def eventually(
    probe: Callable[[], Awaitable[Any]], check: Callable[[Any], bool], timeout: float = 30
) -> Any:
    """probe()'s first answer that passes `check`, polled until `timeout`; then fails with the
    last answer, which is what a reader of the failure needs."""
    last = None
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            while True:
                last = await probe()
                if check(last):
                    return last
                await asyncio.sleep(0.05)
    raise AssertionError(f"not so within {timeout} s; last seen: {last}")
