"""What a run leaves behind, as results arrive and at its end: the request records, the phase
summary and DAG report they feed (and the live metrics, when served), and the summary files.
The scheduler decides; this writes what it measured.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagperf.apis import APIS
from dagperf.apis.endpoint_config import EndpointConfig
from dagperf.dataset.loader import DatasetError
from dagperf.engine import Flight, TreeRun
from dagperf.exports.inputs import write_inputs
from dagperf.exports.records import RecordWriter, record
from dagperf.exports.server_metrics import (
    ScrapeTargets,
    ServerMetrics,
    scrape_forever,
    scrape_once,
)
from dagperf.exports.summary import summary_document, write_summary_csv, write_summary_json
from dagperf.exports.timeslices import timeslices, write_timeslices
from dagperf.graph import RequestGraph
from dagperf.metrics.dag_report import DagReport
from dagperf.metrics.fork_reuse import ForkReuse
from dagperf.metrics.live import LiveMetrics
from dagperf.metrics.locality import Locality
from dagperf.metrics.sessions import SessionMetrics
from dagperf.metrics.summary import PhaseSummary
from dagperf.metrics.window import WindowSample
from dagperf.transport import protocol
from dagperf.vocabulary import catalog


@dataclass
class Artifacts:
    directory: Path
    input_config: dict[str, Any]
    run_info: dict[str, Any] = field(default_factory=dict)

    @property
    def records(self) -> Path:
        return self.directory / "profile_export.jsonl"

    @property
    def summary_json(self) -> Path:
        return self.directory / "profile_export_aiperf.json"

    @property
    def summary_csv(self) -> Path:
        return self.directory / "profile_export_aiperf.csv"

    @property
    def sessions(self) -> Path:
        return self.directory / "session_export.jsonl"

    @property
    def inputs(self) -> Path:
        return self.directory / "inputs.json"


class RunOutput:
    def __init__(
        self,
        artifacts: Artifacts,
        goodput: dict[str, float] | None,
        live: LiveMetrics | None,
        slice_s: float | None = None,
        scrape: ScrapeTargets | None = None,
        window: WindowSample | None = None,
    ):
        """`window`: what the run's window measured, for its verdicts (by default, requests'
        latencies and no objective)."""
        self.artifacts = artifacts
        self.slice_s = slice_s
        self._scrape = scrape
        self.server_metrics: ServerMetrics | None = None
        self._scraping: asyncio.Task[None] | None = None
        self.summary = PhaseSummary(goodput)
        self.window = window or WindowSample((catalog.REQUEST_LATENCY.name,))
        self.dag_report = DagReport()
        self.sessions = SessionMetrics(self.summary.is_good, self._write_session, self.window)
        self.locality = Locality()
        self.fork_reuse = ForkReuse()
        self.live = live
        self._records: RecordWriter | None = None
        self._inputs: tuple[RequestGraph, EndpointConfig] | None = None
        self._api = APIS["chat"]  # the run's, from `open`
        self._inputs_error: str | None = None
        self._session_lines: RecordWriter | None = None

    def open(self, graph: RequestGraph, endpoint: EndpointConfig) -> None:
        """The directory and the records files; raises OSError. The inputs file is written at
        `close`: a large dataset's would otherwise hold back the first request."""
        self.artifacts.directory.mkdir(parents=True, exist_ok=True)
        self._inputs = (graph, endpoint) if graph.inputs_json else None
        self._api = APIS[endpoint.endpoint_type]
        self._records = RecordWriter(self.artifacts.records)
        self._session_lines = RecordWriter(self.artifacts.sessions)
        if self._scrape is not None:  # in the run's event loop, until `close`
            path = self.artifacts.directory / "server_metrics.jsonl"
            self.server_metrics = ServerMetrics(self._scrape, path)
            loop = asyncio.get_running_loop()
            self._scraping = loop.create_task(scrape_forever(self.server_metrics))

    def add(
        self, flight: Flight, result: protocol.Result, issued: int, params: dict[str, Any]
    ) -> None:
        """A measured result: its record line, and its share of every summary."""
        assert self._records is not None
        self.summary.add(result)
        if flight.measured:
            self.window.add(result)
        self.dag_report.add(flight, result)
        self.sessions.add(flight, result, issued)
        self.locality.add(flight, result)
        self.fork_reuse.add(flight, result)
        if self.live is not None:
            self.live.observe(flight, result)
        cap = self._api.max_tokens(params)
        self._records.write(record(flight, result, issued, params, cap))

    def decided(self, in_flight: int, open_runs: int) -> bool:
        """Whether the window decides every objective, whatever the requests in flight and
        the sessions not yet over (the dispatcher's open runs and those being written) are."""
        return self.window.decided(in_flight, open_runs + self.sessions.pending)

    def ttft_p50_ms(self) -> float | None:
        """The median time to first token so far (for the progress line)."""
        ttft = self.summary.distributions.get(catalog.TIME_TO_FIRST_TOKEN.name)
        return ttft.percentiles((50,))[0] if ttft is not None and ttft.count else None

    def retire(self, runs: list[TreeRun]) -> None:
        """Tree runs that ended: their sessions are written once their results are in."""
        for run in runs:
            self.sessions.retire(run)
            self.locality.retire(run)
            self.fork_reuse.retire(run)

    def _write_session(self, line: dict[str, Any]) -> None:
        if self._session_lines is not None:
            self._session_lines.write(line)

    def _writers(self) -> list[RecordWriter]:
        return [w for w in (self._records, self._session_lines) if w is not None]

    def flush(self) -> None:
        for writer in self._writers():
            writer.flush()

    async def close(self) -> None:
        """Finish the files; the servers' metrics get one last scrape, of the run's end."""
        if self._scraping is not None:
            self._scraping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scraping
        if self.server_metrics is not None:
            await scrape_once(self.server_metrics)
            self.server_metrics.close()
        self.sessions.finish()
        self.locality.finish()
        self.fork_reuse.finish()
        for writer in self._writers():
            writer.close()
        if self._inputs is not None:
            try:
                write_inputs(self.artifacts.inputs, *self._inputs)
            except OSError as e:
                self._inputs_error = f"cannot write {self.artifacts.inputs}: {e.strerror or e}"
            except DatasetError as e:  # its file changed during the run: the run says so too
                self._inputs_error = f"cannot write {self.artifacts.inputs}: {e}"

    def write_error(self) -> str | None:
        """Why records could not be written, once they could not."""
        for writer in self._writers():
            if writer.error is not None:
                return f"cannot write {writer.path}: {writer.error.strerror}"
        return self._inputs_error

    def write_summary(
        self,
        branch_stats: dict[str, int],
        complete: bool,
        cancelled: bool,
        window_ns: tuple[int | None, int | None] = (None, None),
    ) -> tuple[dict[str, Any], str | None]:
        """The summary document, written as JSON and CSV; and why the run's output is not
        whole, if it is not. `window_ns`: when the window opened and closed."""
        document = summary_document(
            self.summary,
            branch_stats,
            self.artifacts.input_config,
            self.artifacts.run_info,
            complete=complete,
            cancelled=cancelled,
        )
        sessions = self.sessions.report(self.summary.duration_s)
        document |= sessions | {"dag_report": self.dag_report.report()}
        document["window"] = self.window.report(*window_ns)
        if self.server_metrics is not None:
            document["server_metrics"] = self.server_metrics.report()
        for key, report in (
            ("backend_locality", self.locality.report()),
            ("fork_reuse", self.fork_reuse.report()),
        ):
            if report is not None:
                document[key] = report
        failure = self.write_error()
        try:
            write_summary_json(self.artifacts.summary_json, document)
            write_summary_csv(self.artifacts.summary_csv, self.summary, sessions)
            first = self.summary.first_start_ns
            if self.slice_s is not None and first is not None and failure is None:
                slices = timeslices(self.artifacts.records, first, self.slice_s)
                write_timeslices(self.artifacts.directory, slices, self.artifacts.input_config)
        except OSError as e:
            failure = failure or f"cannot write the summary in {self.artifacts.directory}: {e}"
        return document, failure
