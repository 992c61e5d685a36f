"""The scheduler's HTTP face: /metrics for Prometheus, /status and POST /stop for the operator,
/healthz.

It listens where Prometheus and the operator can reach it, so what changes state needs a
credential: POST /stop takes the run's control token as a bearer token (`dagperf.keys`), and
answers 401 without it. What only reads (/metrics, /status, /healthz) stays open for scrapers and
probes; none of it holds a secret.

What /status and the `--summary-file` say is typed in `dagperf.contract`, which the operator
reads with the same types.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from dagperf.contract import MetricsSummary, Progress, RunState, StatusReport, Workers
from dagperf.engine import Dispatcher
from dagperf.metrics.summary import PhaseSummary

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger("dagperf.scheduler")


def metrics_summary(summary: PhaseSummary) -> MetricsSummary:
    """Throughput, TTFT and ITL percentiles and error rate, so far or final."""

    def percentiles(name: str) -> tuple[float | None, float | None]:
        d = summary.distributions.get(name)
        if d is None or not d.count:
            return None, None
        p50, p99 = d.percentiles((50, 99))
        return _finite(p50), _finite(p99)

    aggregates = summary.aggregates()
    ttft = percentiles("time_to_first_token")
    itl = percentiles("inter_token_latency")
    return MetricsSummary(
        request_throughput=_finite(aggregates["request_throughput"]),
        ttft_p50_ms=ttft[0],
        ttft_p99_ms=ttft[1],
        itl_p50_ms=itl[0],
        itl_p99_ms=itl[1],
        error_rate=_finite(aggregates["request_error_rate"] / 100),
    )


def status_report(
    state: RunState, dispatcher: Dispatcher, workers: Workers, summary: PhaseSummary
) -> StatusReport:
    """The run as the operator reads it from /status."""
    d = dispatcher
    p = d.progress()
    return StatusReport(
        state=state,
        phase=p.phase.label,
        workers=workers,
        progress=Progress(
            requests_sent=p.sent,
            requests_completed=p.completed,
            requests_total=p.expected,
            errors=p.errors,
            in_flight=p.in_flight,
            cut=p.cut,
        ),
        branch_stats=d.branch_stats.as_dict(),
        summary=metrics_summary(summary),
        failure=d.failure,
    )


def _finite(value: float) -> float | None:
    return None if math.isnan(value) or math.isinf(value) else round(value, 4)


class StatusServer:
    def __init__(
        self,
        status: Callable[[], StatusReport],
        registry: CollectorRegistry | None,
        stop: Callable[[str], None],
        token_matches: Callable[[str], bool],
    ):
        self._status = status
        self._registry = registry
        self._stop = stop
        self._token_matches = token_matches
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self, host: str, port: int) -> None:
        # aiohttp here and in the handlers (called only once this ran): a run that serves no
        # /status never loads it, a tenth of a second of its start.
        from aiohttp import web

        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/status", self._status_json)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_post("/stop", self._stop_run)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, host, port).start()
        except OSError as e:
            await self._runner.cleanup()
            raise OSError(e.errno, f"cannot serve metrics on {host}:{port}: {e.strerror}") from None
        self.port = self._runner.addresses[0][1]
        log.info("serving /metrics and /status on port %d", self.port)

    async def linger(self, stopped: asyncio.Event, seconds: float) -> None:
        """Keep serving up to `seconds` after the run, so Prometheus takes a last scrape; a
        stop request ends the wait."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopped.wait(), seconds)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _metrics(self, request: web.Request) -> web.Response:
        from aiohttp import web

        body = generate_latest(self._registry) if self._registry is not None else b""
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _status_json(self, request: web.Request) -> web.Response:
        from aiohttp import web

        body = msgspec.json.encode(self._status())
        return web.Response(body=body, content_type="application/json")

    async def _healthz(self, request: web.Request) -> web.Response:
        from aiohttp import web

        return web.Response(text="ok")

    async def _stop_run(self, request: web.Request) -> web.Response:
        """End the run gracefully, keeping what it measured (a Benchmark's `suspend`)."""
        from aiohttp import web

        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not self._token_matches(token.strip()):
            return web.json_response(
                {"error": "POST /stop needs the run's control token as a bearer token"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="dagperf"'},
            )
        self._stop("stopped on request")
        return web.json_response({"stopping": True})
