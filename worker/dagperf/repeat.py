"""`dagperf profile --num-profile-runs N`: the same run N times, then how much the runs agree.

Runs go to `profile_runs/run_0001` ... in the artifact directory, each a whole run with its own
exports; the aggregate (`dagperf.exports.aggregate`) to `aggregate/`. Every run sends the same
workload: the same seed for arrivals (42 unless `--random-seed` says otherwise), and the warm-up
(`--warmup-request-count`, and a dataset's own, such as a rag trace's documents) before the first
run only, so later runs measure a server already warm. A run that fails is
reported and left out; the aggregate needs two that finished.
"""

from __future__ import annotations

import dataclasses
from typing import TextIO

from dagperf import verdict
from dagperf.console import Console
from dagperf.exports.aggregate import HEADLINE, aggregate, render, write_aggregate
from dagperf.profile import LocalPlan, run_local
from dagperf.vocabulary import catalog

DEFAULT_SEED = 42


async def run_repeated(plan: LocalPlan, runs: int, confidence: float, out: TextIO) -> int:
    documents, labels, failed = [], [], []
    seed = plan.load.random_seed if plan.load.random_seed is not None else DEFAULT_SEED
    for index in range(1, runs + 1):
        label = f"run_{index:04d}"
        update = {"random_seed": seed} | ({"warmup_request_count": 0} if index > 1 else {})
        load = plan.load.model_copy(update=update)
        graph = plan.graph if index == 1 else dataclasses.replace(plan.graph, warmup=())
        run_plan = dataclasses.replace(
            plan,
            graph=graph,
            load=load,
            artifact_dir=plan.artifact_dir / "profile_runs" / label,
            input_config=plan.input_config | {"load": load.model_dump(mode="json")},
        )
        outcome = await run_local(run_plan, Console(quiet=True))
        if outcome.interrupted:
            print(f"dagperf: interrupted in {label}; no aggregate written", file=out)
            return verdict.SIGNALLED
        problem = outcome.failure or outcome.rejected
        if problem is not None:
            failed.append({"label": label, "error": problem})
            print(f"{label}: failed: {problem}", file=out, flush=True)
            continue
        documents.append(outcome.document)
        labels.append(label)
        throughput = outcome.document[catalog.REQUEST_THROUGHPUT.name]["avg"]
        print(f"{label}: {throughput:,.2f} requests/s", file=out, flush=True)
    try:
        result = aggregate(documents, labels, failed, confidence)
    except ValueError as e:
        print(f"dagperf: no aggregate: {e}", file=out)
        return verdict.RUN_FAILED
    write_aggregate(plan.artifact_dir / "aggregate", result)
    out.write(render(result, HEADLINE))
    out.write(f"Artifacts: {plan.artifact_dir}\n")
    return verdict.RUN_FAILED if failed else verdict.OK
