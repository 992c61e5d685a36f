"""`dagperf worker`: one worker in this process, or several as child processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

from dagperf.runtime import lifeline, loops
from dagperf.worker.options import WorkerConfig
from dagperf.worker.shell import Worker


def serve_workers(config: WorkerConfig, keys_dir: str, processes: int, log_flags: list[str]) -> int:
    """The `dagperf worker` command: one worker here, or `processes` child processes named
    `<worker_id>-<index>`. Runs until the scheduler shuts them down or a signal stops them."""
    if processes == 1:
        return loops.run(_serve_one(config))
    stopped_by: set[int] = set()
    children: list[subprocess.Popen[bytes]] = []
    environ = dict(os.environ)

    def forward(sig: int, _frame: object) -> None:
        stopped_by.add(sig)
        for child in children:
            child.send_signal(sig)

    # Forward signals before the first child exists, so none is ever orphaned.
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for index in range(processes):
        if stopped_by:
            break
        command = ["-m", "dagperf", "worker", "--scheduler", config.scheduler, "--processes", "1"]
        command += ["--worker-id", f"{config.worker_id}-{index}", "--keys", keys_dir]
        command += ["--url", config.url]
        if config.endpoint:
            command += ["--endpoint", config.endpoint]
        command += ["--scheduler-timeout", str(config.scheduler_timeout), *log_flags]
        child = subprocess.Popen([sys.executable, *command], env=lifeline.child_env(environ))
        children.append(child)
        for sig in tuple(stopped_by):  # came while it was being started: `forward` missed it
            child.send_signal(sig)
    codes = [child.wait() for child in children]
    # A child still starting up dies of the signal it was sent: that is a clean stop too.
    return max((0 if -code in stopped_by else code for code in codes), default=0)


async def _serve_one(config: WorkerConfig) -> int:
    worker = Worker(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, worker.stop)
    await worker.run()
    return 0
