"""A real Prometheus (the Debian binary) for the tests that check what the scheduler exposes:
it runs on loopback, scrapes one target every second, and answers through its HTTP API. The
tests install nothing: tests/run.sh installs the package."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from runs import free_port

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
SCRAPE_INTERVAL_S = 1


@contextlib.asynccontextmanager
async def scraping(directory: Path) -> AsyncIterator[tuple[str, int]]:
    """Prometheus, ready, scraping 127.0.0.1:<target>; yields its URL and the target port,
    which nothing serves yet: the test starts a run there."""
    assert PROMETHEUS, "needs the prometheus binary: apt-get install prometheus (tests/run.sh does)"
    directory.mkdir(parents=True, exist_ok=True)
    port, target = free_port(), free_port()
    config = directory / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {SCRAPE_INTERVAL_S}s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: dagperf\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
    )
    process = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={directory / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session, asyncio.timeout(60):
            while True:
                try:
                    async with session.get(f"{url}/-/ready") as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.1)
        yield url, target
    finally:
        process.terminate()
        process.wait(timeout=30)


async def api(session: aiohttp.ClientSession, url: str, path: str, **params: str) -> Any:
    """The `data` of a Prometheus HTTP API answer; a refused query fails with Prometheus's own
    message, so a bad expression is not mistaken for a missing series."""
    async with session.get(f"{url}/api/v1/{path}", params=params) as response:
        answer = await response.json()
    assert answer["status"] == "success", (params, answer.get("error"))
    return answer["data"]
