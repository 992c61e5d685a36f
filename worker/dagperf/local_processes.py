"""The processes a local run starts beside its scheduler: the workers and, without --url, the
built-in simulator.

Each is a Python interpreter that takes a good part of a second to import the engine, and
`dagperf profile` starts them before it reads its dataset, so that their start-up overlaps
the read (for a large file, its last checks, which keep one core busy while the other idles).
Everything they need is known from the flags alone: the simulator serves on a loopback socket
bound here first, so its URL is known before it runs; each worker gets its keys and the
scheduler's address, then waits for a line on its standard input before it connects. A run
that never starts (a refused dataset, Ctrl-C while reading) stops them before they did
anything; if this process is killed outright, they die with it (`dagperf.runtime.lifeline`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import zmq

from dagperf.runtime import lifeline
from dagperf.vocabulary.keys import WORKER_FILES, KeySet, SchedulerKeys, load_scheduler_keys

STARTUP_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0


class LaunchError(Exception):
    pass


@dataclass(frozen=True)
class Launch:
    """What the processes of a local run need: all of it known before the dataset is read."""

    workers: int
    url: str | None  # the server's; None: the built-in simulator's
    endpoint: str | None  # the request path, when not the standard one for the type
    api_key: str | None
    keys_dir: Path | None  # a key set of the user's (None: one made for this run)
    log_format: str = "text"
    log_level: str = "WARNING"
    simulator_args: tuple[str, ...] = ()


class LocalProcesses:
    """The started processes of one run: the scheduler's address and keys, the endpoint's URL,
    and the means to let the workers connect, watch them and stop them all."""

    def __init__(self, launch: Launch):
        self.socket_dir = _socket_dir()
        self.address = f"ipc://{self.socket_dir}/scheduler"
        self._processes: list[subprocess.Popen[bytes]] = []
        # A thread per process to wait for its end (what asyncio's own child watcher does)
        # and one to read the simulator's first line; none runs while the dataset is read.
        self._waiter = ThreadPoolExecutor(2 + launch.workers, "dagperf-wait")
        self._exits: dict[int, asyncio.Future[int]] = {}
        try:
            self.scheduler_keys, keys_dir = self._keys(launch.keys_dir)
            self.simulator: subprocess.Popen[bytes] | None = None
            if launch.url is None:
                self.simulator, self.url = self._simulator(launch)
            else:
                self.url = launch.url
            env = {"OPENAI_API_KEY": launch.api_key} if launch.api_key is not None else {}
            self.workers = [
                (f"local-{i}", self._worker(f"local-{i}", keys_dir, launch, env))
                for i in range(launch.workers)
            ]
        except BaseException:
            self.close()
            raise

    def _keys(self, given: Path | None) -> tuple[SchedulerKeys, Path]:
        if given is not None:
            return load_scheduler_keys(given), given
        keys = KeySet.generate()
        keys.write(self.socket_dir / "keys", only=WORKER_FILES)
        return keys.scheduler, self.socket_dir / "keys"

    def _start(
        self, command: list[str], env: dict[str, str] | None = None, **io: Any
    ) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [sys.executable, "-m", "dagperf", *command],
            env=lifeline.child_env(dict(os.environ) | (env or {})),
            # A group of its own (not a session: a session is a scheduler autogroup, and would
            # change how the CPU is shared with the server on the same machine): a signal to
            # our group is ours to handle, then theirs.
            process_group=0,
            **io,
        )
        self._processes.append(process)
        return process

    def _simulator(self, launch: Launch) -> tuple[subprocess.Popen[bytes], str]:
        with socket.create_server(("127.0.0.1", 0)) as listening:
            fd = listening.fileno()
            process = self._start(
                ["simulate", "--fd", str(fd), *launch.simulator_args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                pass_fds=(fd,),
            )
            return process, f"http://127.0.0.1:{listening.getsockname()[1]}"

    def _worker(
        self, name: str, keys_dir: Path, launch: Launch, env: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        path = ["--endpoint", launch.endpoint] if launch.endpoint else []
        return self._start(
            [
                "worker",
                "--scheduler",
                self.address,
                "--keys",
                str(keys_dir),
                "--url",
                self.url,
                *path,
                "--worker-id",
                name,
                "--wait-for-start",
                "--log-format",
                launch.log_format,
                "--log-level",
                launch.log_level,
            ],
            env,  # the API key goes in the environment, never in argv
            stdin=subprocess.PIPE,
        )

    async def serving(self) -> str:
        """The endpoint's URL, once the simulator (if it is ours) says it serves."""
        if self.simulator is None:
            return self.url
        assert self.simulator.stdout is not None
        loop = asyncio.get_running_loop()
        banner = loop.run_in_executor(self._waiter, self.simulator.stdout.readline)
        try:
            said = await asyncio.wait_for(banner, STARTUP_TIMEOUT_S)
        except TimeoutError:
            said = b""
        if b" at " not in said:
            raise LaunchError("the built-in simulator did not start")
        return self.url

    def start_workers(self) -> None:
        """Let the workers connect to the scheduler (which listens by now)."""
        self._tell_workers(b"start\n")

    def _tell_workers(self, word: bytes) -> None:
        """Say `word` on each worker's standard input and close it: end of input without a
        word, and a waiting worker exits quietly."""
        for _, process in self.workers:
            if process.stdin is not None and not process.stdin.closed:
                with contextlib.suppress(OSError):  # it died: its watcher says so
                    process.stdin.write(word)
                with contextlib.suppress(OSError):
                    process.stdin.close()

    def watch(self, on_exit: Callable[[str, str], None]) -> list[asyncio.Future[None]]:
        """Call `on_exit(name, why)` when a worker's process ends."""

        async def watch(name: str, process: subprocess.Popen[bytes]) -> None:
            code = await asyncio.shield(self._exit(process))
            on_exit(name, f"its process exited with code {code}")

        return [asyncio.ensure_future(watch(name, p)) for name, p in self.workers]

    def _exit(self, process: subprocess.Popen[bytes]) -> asyncio.Future[int]:
        if process.pid not in self._exits:
            loop = asyncio.get_running_loop()
            self._exits[process.pid] = loop.run_in_executor(self._waiter, process.wait)
        return self._exits[process.pid]

    async def stop(self) -> None:
        """The workers have been told to shut down (or never started): give every process a
        moment, then make sure."""
        self._tell_workers(b"")
        if self.simulator is not None and self.simulator.poll() is None:
            self.simulator.terminate()
        await asyncio.gather(*(self._stop(p) for p in self._processes))

    async def _stop(self, process: subprocess.Popen[bytes]) -> None:
        for then in (process.terminate, process.kill, None):
            if process.poll() is not None:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._exit(process)), STOP_TIMEOUT_S)
                return
            if then is not None:
                then()

    def close(self) -> None:
        """Kill whatever still runs (the workers of a run that never started, say) and remove
        the socket directory."""
        for process in self._processes:
            if process.poll() is None:
                process.kill()
        for process in self._processes:
            process.wait()
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
        self._waiter.shutdown(wait=False)
        shutil.rmtree(self.socket_dir, ignore_errors=True)

    def __enter__(self) -> LocalProcesses:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _socket_dir() -> Path:
    """A private (0700) directory for the run's socket and keys, on a path short enough for a
    Unix socket (`zmq.IPC_PATH_MAX_LEN`, 107 bytes here): the temporary directory, else /tmp."""
    for base in (None, "/tmp"):
        with contextlib.suppress(OSError):
            path = Path(tempfile.mkdtemp(prefix="dagperf-", dir=base))
            if len(f"{path}/scheduler") <= zmq.IPC_PATH_MAX_LEN:
                return path
            shutil.rmtree(path, ignore_errors=True)
    raise LaunchError(
        f"no temporary directory gives a socket path under {zmq.IPC_PATH_MAX_LEN} bytes: set "
        "TMPDIR to a shorter one"
    )
