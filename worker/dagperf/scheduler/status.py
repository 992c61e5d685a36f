"""What the scheduler shows while it runs: /metrics for Prometheus, /status and POST /stop for the
operator, /healthz, and the progress the console prints (`LiveStatus`).

It listens where Prometheus and the operator can reach it, so what changes state needs a credential:
POST /stop takes the run's control token as a bearer token (`dagperf.vocabulary.keys`), and answers
401 without it. What only reads (/metrics, /status, /healthz) stays open for scrapers and probes;
none of it holds a secret.

What /status and the `--summary-file` say is typed in `dagperf.vocabulary.contract`, which the
operator reads with the same types.
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

from dagperf.engine import Dispatcher
from dagperf.engine import Progress as DispatchProgress
from dagperf.exports.run import RunOutput
from dagperf.metrics.live import LiveMetrics
from dagperf.metrics.summary import PhaseSummary
from dagperf.scheduler.options import SchedulerOptions
from dagperf.vocabulary import catalog
from dagperf.vocabulary.contract import MetricsSummary, Progress, RunState, StatusReport, Workers

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger("dagperf.scheduler")


def metrics_summary(summary: PhaseSummary) -> MetricsSummary:
    """Throughput, TTFT and ITL percentiles and error rate, so far or final."""

    def percentiles(name: str) -> tuple[float | None, float | None]:
        distribution = summary.distributions.get(name)
        if distribution is None or not distribution.count:
            return None, None
        p50, p99 = distribution.percentiles((50, 99))
        return _finite(p50), _finite(p99)

    aggregates = summary.aggregates()
    ttft = percentiles(catalog.TIME_TO_FIRST_TOKEN.name)
    itl = percentiles(catalog.INTER_TOKEN_LATENCY.name)
    return MetricsSummary(
        request_throughput=_finite(aggregates[catalog.REQUEST_THROUGHPUT.name]),
        ttft_p50_ms=ttft[0],
        ttft_p99_ms=ttft[1],
        itl_p50_ms=itl[0],
        itl_p99_ms=itl[1],
        error_rate=_finite(aggregates[catalog.REQUEST_ERROR_RATE.name] / 100),
    )


def status_report(
    state: RunState, dispatcher: Dispatcher, workers: Workers, summary: PhaseSummary
) -> StatusReport:
    """The run as the operator reads it from /status."""
    progress = dispatcher.progress()
    return StatusReport(
        state=state,
        phase=progress.phase.label,
        workers=workers,
        progress=Progress(
            requests_sent=progress.sent,
            requests_completed=progress.completed,
            requests_total=progress.expected,
            errors=progress.errors,
            in_flight=progress.in_flight,
            cut=progress.cut,
        ),
        branch_stats=dispatcher.branch_stats.as_dict(),
        summary=metrics_summary(summary),
        failure=dispatcher.failure,
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


class LiveStatus:
    """The run as it goes: live metrics at /metrics, /status and POST /stop (a `StatusServer`,
    when the options give a metrics port), and the console's progress; refreshed every
    heartbeat and once more at the end, then served a while longer for a last scrape."""

    def __init__(
        self,
        metrics: LiveMetrics | None,
        options: SchedulerOptions,
        dispatcher: Dispatcher,
        output: RunOutput,
        on_progress: Callable[[DispatchProgress, float | None], None] | None,
    ):
        """`metrics`: the run's, which its `output` feeds; None without a metrics port."""
        self.metrics = metrics
        self._options = options
        self._dispatcher = dispatcher
        self._output = output
        self._on_progress = on_progress
        self._server: StatusServer | None = None

    async def serve(self, status: Callable[[], StatusReport], stop: Callable[[str], None]) -> None:
        port = self._options.metrics_port
        if port is None:
            return
        registry = self.metrics.registry if self.metrics else None
        self._server = StatusServer(status, registry, stop, self._options.keys.token_matches)
        await self._server.start(self._options.metrics_host, port)

    def refresh(self, workers: int, running: bool) -> None:
        """The live metrics, and (once the run is `running`) the console's progress."""
        if running and self._on_progress is not None:
            self._on_progress(self._dispatcher.progress(), self._output.ttft_p50_ms())
        if self.metrics is not None:
            dispatcher = self._dispatcher
            self.metrics.update(dispatcher.progress(), workers, dispatcher.branch_stats)

    async def close(self, workers: int, stopped: asyncio.Event) -> None:
        """The run is over: show its end, then serve until the linger is over or a stop."""
        if self._server is None:
            return
        self.refresh(workers, running=False)
        await self._server.linger(stopped, self._options.metrics_linger_s)
        await self._server.stop()
