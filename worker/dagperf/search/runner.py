"""Each step of a search is a full local run (`dagperf.profile`) in a directory of its own.

`search_results.json` in the search's directory is rewritten after every step, so a search
stopped half way keeps what it measured: the parameter, the objectives, the answer so far and
every step with its figures and directory.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from dagperf import verdict
from dagperf.console import Console
from dagperf.exports.files import whole_or_nothing
from dagperf.metrics.censored import CONFIDENCE
from dagperf.profile import LocalPlan, run_local
from dagperf.search.objectives import Objective
from dagperf.search.plan import DEFAULT_MAX_STEP_S, PARAMETERS, SearchPlan
from dagperf.search.steps import step_line, step_record, table
from dagperf.verdict import Verdict
from dagperf.vocabulary import catalog
from dagperf.vocabulary.config import LoadConfig
from dagperf.vocabulary.contract import (
    FinalReport,
    MetricsSummary,
    Progress,
    RunState,
    SearchReport,
    SearchStep,
)

MAX_RATE_WARMUP = 100


@dataclass
class Search:
    parameter: str
    objectives: list[Objective]
    plan: SearchPlan
    base: LocalPlan  # every step's run but for its load and directory
    directory: Path
    confidence: float = CONFIDENCE  # of each percentile's verdict
    # Each step measures until its objectives are decided, at most this long (None: each step
    # runs the count it was given, and is judged on it).
    max_step_s: float | None = DEFAULT_MAX_STEP_S

    def results(self, steps: list[dict[str, Any]]) -> dict[str, Any]:
        best, undecided = self.plan.best, self.plan.undecided
        shown = None if best is None else _shown(best, self.plan.integer)
        span = [shown, _shown(undecided[-1], self.plan.integer)] if shown and undecided else None
        return {
            "parameter": self.parameter,
            "slo": [str(o) for o in self.objectives],
            "confidence": self.confidence,
            "best": shown,
            "best_range": span,  # the knee lies in it, when undecided steps leave it open
            "steps": steps,
        }


async def run_search(search: Search, out: TextIO) -> int:
    """The search's exit code: 0 with an answer (or stopped on request), `verdict.SLO_NOT_MET`
    without one, `verdict.RUN_FAILED` when a step failed outright."""
    steps: list[dict[str, Any]] = []
    documents: list[dict[str, Any]] = []
    search.directory.mkdir(parents=True, exist_ok=True)
    state, reason, code = RunState.SUCCEEDED, None, verdict.OK
    while (value := search.plan.next_value()) is not None:
        index = len(steps) + 1
        step_plan = _step(search, value, index)
        print(
            f"step {index}: {search.parameter} {_shown(value, search.plan.integer)} ...",
            file=out,
            flush=True,
        )
        outcome = await run_local(step_plan, Console(quiet=True))
        if outcome.failure is not None or outcome.interrupted or outcome.stopped:
            state = outcome.state
            reason = f"step {index} did not finish: {outcome.failure or outcome.stop_reason}"
            print(f"dagperf: {reason}; the search ends here", file=out)
            code = verdict.SIGNALLED if outcome.interrupted else verdict.OK
            code = verdict.RUN_FAILED if outcome.failure else code
            break
        shown = _shown(value, search.plan.integer)
        step = step_record(shown, outcome.document, step_plan.artifact_dir)
        search.plan.record(value, Verdict(step["verdict"]))
        documents.append(outcome.document)
        steps.append(step)
        _write(search, steps)
        print(step_line(step), file=out, flush=True)
    _write(search, steps)
    out.write(table(search.results(steps)))
    if state is RunState.SUCCEEDED and search.plan.best is None:
        state, reason = RunState.FAILED, "no load tried met every objective"
        code = verdict.SLO_NOT_MET
    _final_report(search, steps, documents, state, reason)
    return code


def _final_report(
    search: Search,
    steps: list[dict[str, Any]],
    documents: list[dict[str, Any]],
    state: RunState,
    reason: str | None,
) -> None:
    """What the operator reads from --summary-file: the answer, the steps, and the figures of
    the step at the answer (or the last one)."""
    options = search.base.scheduler_options
    path = options.get("summary_file")
    if path is None:
        return

    def total(metric: catalog.Metric) -> int:
        return sum(int((d.get(metric.name) or {}).get("avg", 0)) for d in documents)

    errors, cut = total(catalog.ERROR_REQUEST_COUNT), total(catalog.CUT_REQUEST_COUNT)
    completed = total(catalog.REQUEST_COUNT) + errors + cut
    at = [
        d
        for d, s in zip(documents, steps, strict=True)
        if s["value"] == search.results(steps)["best"]
    ]
    shown = (at or documents or [{}])[-1]
    results = search.results(steps)
    report = FinalReport(
        outcome=state,
        reason=reason,
        benchmark=options.get("benchmark"),
        progress=Progress(
            requests_completed=completed, requests_total=completed, errors=errors, cut=cut
        ),
        summary=_metrics_summary(shown),
        results_path=str(search.directory),
        search=SearchReport(
            parameter=search.parameter,
            slo=results["slo"],
            best=results["best"],
            steps=[SearchStep(s["value"], s["meets_slo"], s["verdict"]) for s in steps],
        ),
    )
    Path(path).write_bytes(report.compact())


def _metrics_summary(document: dict[str, Any]) -> MetricsSummary:
    def figure(metric: catalog.Metric, stat: str, scale: float = 1.0) -> float | None:
        value = (document.get(metric.name) or {}).get(stat)
        return None if value is None or not math.isfinite(value) else round(value * scale, 4)

    return MetricsSummary(
        request_throughput=figure(catalog.REQUEST_THROUGHPUT, "avg"),
        ttft_p50_ms=figure(catalog.TIME_TO_FIRST_TOKEN, "p50"),
        ttft_p99_ms=figure(catalog.TIME_TO_FIRST_TOKEN, "p99"),
        itl_p50_ms=figure(catalog.INTER_TOKEN_LATENCY, "p50"),
        itl_p99_ms=figure(catalog.INTER_TOKEN_LATENCY, "p99"),
        error_rate=figure(catalog.REQUEST_ERROR_RATE, "avg", 0.01),
    )


def _step(search: Search, value: float, index: int) -> LocalPlan:
    """The base run at one load, with a warm-up of as many requests as the load keeps busy
    (unless one was asked for), judged on the objectives, in a directory of its own."""
    base = search.base
    field = PARAMETERS[search.parameter]
    update: dict[str, Any] = {field: int(value) if search.plan.integer else value}
    if field == "request_rate":
        update["fixed_schedule"] = False  # a timed dataset runs at the searched rate
    if not base.load.warmup_request_count:
        update["warmup_request_count"] = min(math.ceil(value), MAX_RATE_WARMUP)
    if search.max_step_s is not None:  # it measures until decided: no count of roots stops it
        update["num_conversations"] = None
    load = LoadConfig(**(base.load.model_dump() | update))
    name = f"step{index:02d}-{search.parameter}-{_shown(value, search.plan.integer)}"
    inputs = base.input_config | {"load": load.model_dump(mode="json")}
    options = base.scheduler_options | {
        "summary_file": None,  # the search writes its own
        "objectives": tuple(search.objectives),
        "confidence": search.confidence,
        "max_duration_s": search.max_step_s,
    }
    return dataclasses.replace(
        base,
        load=load,
        artifact_dir=search.directory / name,
        input_config=inputs,
        scheduler_options=options,
    )


def _write(search: Search, steps: list[dict[str, Any]]) -> None:
    with whole_or_nothing(search.directory / "search_results.json") as f:
        f.write(json.dumps(search.results(steps), indent=2) + "\n")


def _shown(value: float, integer: bool) -> int | float:
    return int(value) if integer else round(value, 6)
