"""Serving the simulator: in-process (`running_simulator`) or as the `dagperf simulate` command."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import web

from dagperf.runtime import loops
from dagperf.simulator.config import SimConfig
from dagperf.simulator.server import Simulator

BACKLOG = 4096


@dataclass(frozen=True)
class RunningSimulator:
    simulator: Simulator
    url: str  # base URL, e.g. http://127.0.0.1:41234


@contextlib.asynccontextmanager
async def running_simulator(
    config: SimConfig | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    listening: socket.socket | None = None,
) -> AsyncIterator[RunningSimulator]:
    """Serve a simulator on the running loop until the block exits, on a socket already
    listening or else on `host` and `port` (0 picks a free one)."""
    simulator = Simulator(config)
    runner = web.AppRunner(simulator.app(), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        # Room for every connection a high-concurrency run opens at once: past the default
        # accept queue (128), a dropped SYN is retried a whole second later.
        site: web.BaseSite = (
            web.TCPSite(runner, host, port, reuse_address=True, backlog=BACKLOG)
            if listening is None
            else web.SockSite(runner, listening, backlog=BACKLOG)
        )
        await site.start()
        bound = runner.addresses[0]
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        yield RunningSimulator(simulator, f"http://{shown}:{bound[1]}")
    finally:
        await runner.cleanup()


def serve_simulator(config: SimConfig, host: str, port: int, fd: int | None = None) -> None:
    """Serve until SIGINT or SIGTERM (the `dagperf simulate` command), on the listening socket
    `fd` when given."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        listening = None if fd is None else socket.socket(fileno=fd)
        async with running_simulator(config, host, port, listening) as sim:
            print(f"dagperf simulator serving {config.model!r} at {sim.url}", flush=True)
            await stop.wait()

    try:
        loops.run(main())
    except OSError as e:  # address in use, unknown host, no permission for the port
        message = f"dagperf simulate: cannot listen on {host}:{port}: {e.strerror or e}"
        raise SystemExit(message) from None
