"""`dagperf profile`: the whole engine on one machine, as the operator runs it on a cluster.

The scheduler runs in this process; each worker is a `dagperf worker` child process connected
over an IPC socket in a private (0700) temporary directory, with a CURVE key set made for this
run alone (the workers' half written there too), so the local wire is authenticated and
encrypted as a cluster's is; without `--url`, a `dagperf simulate` child serves the run
(`dagperf.local_processes` starts and stops them). Everything started here is stopped here, on
success, failure or Ctrl-C (the first asks the scheduler to cancel and write what it has; a
second one stops at once), and the socket directory is removed; if this process is killed
outright, its children die with it (`dagperf.runtime.lifeline`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagperf.apis import APIS
from dagperf.apis.endpoint_config import EndpointConfig
from dagperf.console import Console
from dagperf.graph import RequestGraph
from dagperf.local_processes import STARTUP_TIMEOUT_S, Launch, LaunchError, LocalProcesses
from dagperf.runtime import loops
from dagperf.scheduler import Artifacts, Outcome, Scheduler, SchedulerError, SchedulerOptions
from dagperf.vocabulary.config import LoadConfig

log = logging.getLogger(__name__)


class ProfileError(Exception):
    pass


@dataclass
class LocalPlan:
    graph: RequestGraph
    endpoint: dict[str, Any]  # EndpointConfig fields; `url` and `model` may still be None
    load: LoadConfig
    launch: Launch  # its processes
    artifact_dir: Path
    input_config: dict[str, Any]
    scheduler_options: dict[str, Any] = field(default_factory=dict)  # metrics and reporting


async def run_local(
    plan: LocalPlan, console: Console, processes: LocalProcesses | None = None
) -> Outcome:
    """One run: its processes (started here, unless `dagperf profile` started them while it
    read the dataset) and the scheduler, until the run ends."""
    async with contextlib.AsyncExitStack() as stack:
        if processes is None:
            processes = stack.enter_context(LocalProcesses(plan.launch))
        stack.push_async_callback(processes.stop)
        endpoint_fields = dict(plan.endpoint) | {"url": await processes.serving()}
        if endpoint_fields.get("model") is None:
            endpoint_fields["model"] = await default_model(
                plan.graph,
                endpoint_fields["url"],
                endpoint_fields.get("api_key"),
                endpoint_fields.get("endpoint_type", "chat"),
            )
        endpoint = EndpointConfig(**endpoint_fields)
        plan.input_config["endpoint"] = endpoint.redacted()
        artifacts = Artifacts(plan.artifact_dir, plan.input_config)
        scheduler = Scheduler(
            plan.graph,
            endpoint,
            plan.load,
            artifacts,
            SchedulerOptions(
                keys=processes.scheduler_keys,
                bind=processes.address,
                expected_workers=plan.launch.workers,
                registration_timeout_s=STARTUP_TIMEOUT_S,
                **plan.scheduler_options,
            ),
            on_progress=console.progress,
        )
        watchers = processes.watch(scheduler.worker_exited)
        stack.callback(lambda: [w.cancel() for w in watchers])
        running = asyncio.ensure_future(scheduler.run())
        # One turn of the loop runs the scheduler's first step, which binds its socket: the
        # workers then connect at once (before it, they would retry 100 ms later).
        await asyncio.sleep(0)
        processes.start_workers()
        with _interruptible(scheduler):
            outcome = await running
        console.done()
        return outcome


async def default_model(
    graph: RequestGraph, url: str, api_key: str | None = None, endpoint_type: str = "chat"
) -> str:
    """The model for turns that name none, when --model is not given: the first model the
    server lists. When every turn names its model, none is needed and the server is not asked."""
    named = graph.shape.models
    if None not in named:
        return sorted(m for m in named if m is not None)[0]
    return await discover_model(url, api_key, endpoint_type)


async def discover_model(url: str, api_key: str | None = None, endpoint_type: str = "chat") -> str:
    """The first model the server lists (OpenAI's and Anthropic's lists alike), asked with the
    key as the endpoint's API sends it."""
    import aiohttp  # here: a run that names its model never loads it (a tenth of a second)

    base = EndpointConfig(url=url, model="-").url
    headers = APIS[endpoint_type].request_headers(api_key)
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
    except (ProfileError, LaunchError, SchedulerError) as e:
        print(f"dagperf: {e}", file=sys.stderr)
        return 1
    except asyncio.CancelledError:
        return 130
