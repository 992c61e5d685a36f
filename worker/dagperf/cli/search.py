"""`dagperf search`: the highest load that meets the objectives, by full local runs."""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace

from dagperf import verdict
from dagperf.cli.artifacts import unused_default, write_runs_report
from dagperf.cli.flags import Commands
from dagperf.cli.local_run import checked, local_flags, local_plan
from dagperf.cli.run_options import search_flags, search_options
from dagperf.runtime.logs import setup_logging
from dagperf.search.plan import search_load_problem


def add_search(commands: Commands) -> None:
    search = commands.add_parser(
        "search",
        help="find the highest load that meets service-level objectives",
        description="Run the benchmark at one load after another, each a full run with its own "
        "exports, to find the highest --search-parameter at which every --slo objective is "
        "met: doubling from --search-min until a step misses or --search-max is reached, then "
        "halving the gap (or each --sweep value in turn). Each step measures until each "
        "objective is met or missed (requests it cuts short count as censored values, not "
        "errors), or says it is undecided and why. Writes search_results.json. Exit 0 with an "
        "answer, 4 when no load tried met the objectives. See docs/search.md.",
    )
    local_flags(search)
    search_flags(search)
    search.set_defaults(run=_search)


def _search(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dagperf.profile import run_sync
    from dagperf.search.objectives import parse_objectives, unmeasurable
    from dagperf.search.plan import SearchPlan
    from dagperf.search.runner import Search, run_search

    run = checked(args, parser)
    options, wanted = run.options, search_options(parser, args)
    setup_logging(options.log.log_format, getattr(logging, options.log.log_level))
    objectives = parse_objectives(" ".join(wanted.slo))
    if options.runs.num_profile_runs != 1:
        parser.error("--num-profile-runs: a search runs each load once (see docs/search.md)")
    if problem := unmeasurable(objectives, options.endpoint.streaming):
        parser.error(f"--slo: {problem}")
    parameter, load = wanted.search_parameter, options.load
    if refused := search_load_problem(parameter, load, wanted.max_step_duration):
        field, why = refused
        parser.error(f"--{field.replace('_', '-')}: {why}")
    plan = SearchPlan(
        wanted.search_min, wanted.search_max, wanted.integer, wanted.precision, wanted.sweep
    )
    counted = bool(load.request_count or load.num_conversations)  # each step runs its count
    if options.output.artifact_dir is None:
        kind = f"{options.endpoint.endpoint_type}-search-{parameter}"
        output = options.output.model_copy(
            update={"artifact_dir": unused_default(options.dataset, kind)}
        )
        run = replace(run, options=replace(options, output=output))
    base = local_plan(args, parser, run)
    if base is None:
        return verdict.USAGE
    search = Search(
        parameter,
        objectives,
        plan,
        base,
        base.artifact_dir,
        options.runs.confidence_level,
        None if counted else wanted.max_step_duration,
    )

    async def go() -> int:
        code = await run_search(search, sys.stdout)
        if (results := base.artifact_dir / "search_results.json").exists():
            print(f"Search results: {results}")
        if options.output.report:  # every step compared, beside search_results.json
            write_runs_report(base.artifact_dir, "step*", base.artifact_dir)
        return code

    return run_sync(go)
