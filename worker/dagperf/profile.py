"""`dagperf profile`: the whole engine on one machine, as the operator runs it on a cluster.

The scheduler runs in this process; each worker is a `dagperf worker` child process connected
over an IPC socket in a private (0700) temporary directory, with a CURVE key set made for this
run alone (the workers' half written there too), so the local wire is authenticated and
encrypted as a cluster's is; without `--url`, a `dagperf simulate` child serves the run.
Everything started here is stopped here, on success, failure or Ctrl-C (the first asks the
scheduler to cancel and write what it has; a second one stops at once), and the socket
directory is removed; if this process is killed outright, its children die with it
(`dagperf.runtime.lifeline`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import zmq

from dagperf.config import EndpointConfig, LoadConfig
from dagperf.console import Console
from dagperf.graph import RequestGraph
from dagperf.keys import WORKER_FILES, KeySet, load_scheduler_keys
from dagperf.runtime import lifeline, loops
from dagperf.scheduler import Artifacts, Outcome, Scheduler, SchedulerError, SchedulerOptions

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0


class ProfileError(Exception):
    pass


@dataclass
class LocalPlan:
    graph: RequestGraph
    endpoint: dict[str, Any]  # EndpointConfig fields; `url` and `model` may still be None
    load: LoadConfig
    workers: int
    artifact_dir: Path
    input_config: dict[str, Any]
    log_format: str = "text"
    worker_log_level: str = "WARNING"
    simulator_args: tuple[str, ...] = ()
    scheduler_options: dict[str, Any] = field(default_factory=dict)  # metrics and reporting
    keys_dir: Path | None = None  # a key set of the user's (its control token stops the run)


async def run_local(plan: LocalPlan, console: Console) -> Outcome:
    async with contextlib.AsyncExitStack() as stack:
        endpoint_fields = dict(plan.endpoint)
        if endpoint_fields.get("url") is None:
            simulator = await stack.enter_async_context(_child_simulator(plan.simulator_args))
            endpoint_fields["url"] = simulator
        if endpoint_fields.get("model") is None:
            endpoint_fields["model"] = await default_model(
                plan.graph, endpoint_fields["url"], endpoint_fields.get("api_key")
            )
        endpoint = EndpointConfig(**endpoint_fields)
        plan.input_config["endpoint"] = endpoint.redacted()
        socket_dir = _socket_dir()
        stack.callback(shutil.rmtree, socket_dir, ignore_errors=True)
        if plan.keys_dir is None:
            keys = KeySet.generate()
            keys_dir = socket_dir / "keys"
            keys.write(keys_dir, only=WORKER_FILES)
            scheduler_keys = keys.scheduler
        else:
            keys_dir, scheduler_keys = plan.keys_dir, load_scheduler_keys(plan.keys_dir)
        artifacts = Artifacts(plan.artifact_dir, plan.input_config)
        scheduler = Scheduler(
            plan.graph,
            endpoint,
            plan.load,
            artifacts,
            SchedulerOptions(
                keys=scheduler_keys,
                bind=f"ipc://{socket_dir}/scheduler",
                expected_workers=plan.workers,
                registration_timeout_s=STARTUP_TIMEOUT_S,
                **plan.scheduler_options,
            ),
            on_progress=console.progress,
        )
        env = dict(os.environ)
        if endpoint.api_key is not None:
            env["OPENAI_API_KEY"] = endpoint.api_key.get_secret_value()
        address = f"ipc://{socket_dir}/scheduler"
        workers = [
            await _spawn_worker(f"local-{i}", address, keys_dir, endpoint, plan, env)
            for i in range(plan.workers)
        ]
        stack.push_async_callback(_stop_all, workers)
        watchers = [asyncio.ensure_future(_watch(name, p, scheduler)) for name, p in workers]
        stack.callback(lambda: [w.cancel() for w in watchers])
        with _interruptible(scheduler):
            outcome = await scheduler.run()
        console.done()
        return outcome


def _socket_dir() -> Path:
    """A private (0700) directory for the run's socket and keys, on a path short enough for a
    Unix socket (`zmq.IPC_PATH_MAX_LEN`, 107 bytes here): the temporary directory, else /tmp."""
    for base in (None, "/tmp"):
        with contextlib.suppress(OSError):
            path = Path(tempfile.mkdtemp(prefix="dagperf-", dir=base))
            if len(f"{path}/scheduler") <= zmq.IPC_PATH_MAX_LEN:
                return path
            shutil.rmtree(path, ignore_errors=True)
    raise ProfileError(
        f"no temporary directory gives a socket path under {zmq.IPC_PATH_MAX_LEN} bytes: set "
        "TMPDIR to a shorter one"
    )


async def _spawn_worker(
    name: str,
    address: str,
    keys: Path,
    endpoint: EndpointConfig,
    plan: LocalPlan,
    env: dict[str, str],
) -> tuple[str, asyncio.subprocess.Process]:
    path = ["--endpoint", endpoint.endpoint] if endpoint.endpoint else []
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "dagperf",
        "worker",
        "--scheduler",
        address,
        "--keys",
        str(keys),
        "--url",
        endpoint.url,
        *path,
        "--worker-id",
        name,
        "--log-format",
        plan.log_format,
        "--log-level",
        plan.worker_log_level,
        env=lifeline.child_env(env),
        stdin=asyncio.subprocess.DEVNULL,
        # A group of its own (not a session: a session is a scheduler autogroup, and would
        # change how the CPU is shared with the server on the same machine).
        preexec_fn=os.setpgrp,  # a signal to our group is ours to handle, then theirs
    )
    return name, process


async def _watch(name: str, process: asyncio.subprocess.Process, scheduler: Scheduler) -> None:
    code = await process.wait()
    scheduler.worker_exited(name, f"its process exited with code {code}")


async def _stop_all(workers: list[tuple[str, asyncio.subprocess.Process]]) -> None:
    """Workers have been told to shut down; give them a moment, then make sure."""
    await asyncio.gather(*(_stop(process) for _, process in workers))


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    try:
        await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
        return
    except TimeoutError:
        process.terminate()
    try:
        await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()


@contextlib.asynccontextmanager
async def _child_simulator(args: tuple[str, ...]) -> AsyncIterator[str]:
    """A `dagperf simulate` process on a free loopback port; yields its URL."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "dagperf",
        "simulate",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        env=lifeline.child_env(dict(os.environ)),
        preexec_fn=os.setpgrp,
    )
    try:
        assert process.stdout is not None
        try:
            banner = await asyncio.wait_for(process.stdout.readline(), STARTUP_TIMEOUT_S)
        except TimeoutError:
            banner = b""
        if b" at " not in banner:
            raise ProfileError("the built-in simulator did not start")
        url = banner.decode().rsplit(" at ", 1)[1].strip()
        log.info("built-in simulator serving at %s", url)
        yield url
    finally:
        if process.returncode is None:
            process.terminate()
        await _stop(process)


async def default_model(graph: RequestGraph, url: str, api_key: str | None = None) -> str:
    """The model for turns that name none, when --model is not given: the first model the
    server lists. When every turn names its model, none is needed and the server is not asked."""
    named = graph.shape.models
    if None not in named:
        return sorted(m for m in named if m is not None)[0]
    return await discover_model(url, api_key)


async def discover_model(url: str, api_key: str | None = None) -> str:
    """The first model the server lists."""
    base = EndpointConfig(url=url, model="-").url
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = aiohttp.ClientTimeout(total=10)
    try:
        async with (
            aiohttp.ClientSession(trust_env=False) as session,
            session.get(f"{base}/v1/models", headers=headers, timeout=timeout) as response,
        ):
            response.raise_for_status()  # 401 without the key: say so, not "KeyError: 'data'"
            models = (await response.json(content_type=None))["data"]
            return str(models[0]["id"])
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, IndexError, TypeError) as e:
        raise ProfileError(
            f"could not read a model name from {base}/v1/models ({type(e).__name__}: {e}); "
            "pass --model"
        ) from None


@contextlib.contextmanager
def _interruptible(scheduler: Scheduler) -> Iterator[None]:
    """First Ctrl-C (or SIGTERM): cancel and write what there is. Second: stop now."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    presses = 0

    def on_signal() -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            log.warning(
                "interrupted: cancelling requests in flight (press Ctrl-C again to quit now)"
            )
            scheduler.interrupt("interrupted")
        elif task is not None:
            task.cancel()

    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, on_signal)
    try:
        yield
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


def run_sync(main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    try:
        return loops.run(main())
    except (ProfileError, SchedulerError) as e:
        print(f"dagperf: {e}", file=sys.stderr)
        return 1
    except asyncio.CancelledError:
        return 130
