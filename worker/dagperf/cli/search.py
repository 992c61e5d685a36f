"""`dagperf search`: the highest load that meets the objectives, by full local runs."""

from __future__ import annotations

import argparse
import logging
import math
import sys

from dagperf import verdict
from dagperf.cli.benchmark import unused_default, write_runs_report
from dagperf.cli.flags import Commands, model_from_flags
from dagperf.cli.roles import local_plan, profile_flags
from dagperf.runtime.logs import setup_logging
from dagperf.search.plan import DEFAULT_MAX_STEP_S, PARAMETERS, search_load_problem
from dagperf.vocabulary.config import LoadConfig

RATE_PRECISION = 0.05


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
    profile_flags(search)
    group = search.add_argument_group("search")
    group.add_argument(
        "--slo",
        required=True,
        metavar='"METRIC:STAT:VALUE ..."',
        help='objectives every step is judged on, e.g. "time_to_first_token:p99:500 '
        'error_rate:max:0.01" (ms for times; STAT avg, min, max or p1..p99)',
    )
    group.add_argument(
        "--search-parameter",
        choices=tuple(PARAMETERS),
        default="concurrency",
        help="the load varied (default: %(default)s; session_rate is roots per second)",
    )
    group.add_argument(
        "--search-min",
        type=float,
        default=1.0,
        metavar="V",
        help="the lowest load tried, first (default: %(default)s)",
    )
    group.add_argument(
        "--search-max",
        type=float,
        default=256.0,
        metavar="V",
        help="the highest load tried (default: %(default)s)",
    )
    group.add_argument(
        "--search-precision",
        type=float,
        metavar="P",
        help=f"stop when the answer is within this of the lowest load that missed: a share "
        f"for a rate (default {RATE_PRECISION}), a step for a concurrency (default 1)",
    )
    group.add_argument(
        "--sweep", metavar="V,V,...", help="try exactly these loads, in order, instead of searching"
    )
    group.add_argument(
        "--max-step-duration",
        type=float,
        default=DEFAULT_MAX_STEP_S,
        metavar="S",
        help="the longest a step measures: each runs at least --benchmark-duration (default "
        "0), then until every objective is met or missed (--confidence-level for percentiles), "
        "at most this long, and says undecided if it still cannot (default: %(default)s; "
        "ignored under --request-count or --num-conversations, which a step runs as given)",
    )
    search.set_defaults(run=_search)


def _search(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dagperf.profile import run_sync
    from dagperf.search.objectives import parse_objectives, unmeasurable
    from dagperf.search.plan import SearchPlan
    from dagperf.search.runner import Search, run_search

    setup_logging(args.log_format, getattr(logging, args.log_level))
    try:
        objectives = parse_objectives(args.slo)
    except ValueError as e:
        parser.error(f"--slo: {e}")
    if args.num_profile_runs != 1:
        parser.error("--num-profile-runs: a search runs each load once (see docs/search.md)")
    if problem := unmeasurable(objectives, args.streaming):
        parser.error(f"--slo: {problem}")
    if not 0 < args.max_step_duration < math.inf:
        parser.error(f"--max-step-duration: seconds above 0, got {args.max_step_duration}")
    parameter = args.search_parameter
    load = model_from_flags(parser, args, LoadConfig)
    if refused := search_load_problem(parameter, load, args.max_step_duration):
        field, why = refused
        parser.error(f"--{field.replace('_', '-')}: {why}")
    integer = parameter == "concurrency"
    sweep = _sweep(parser, args.sweep, integer)
    precision = args.search_precision or (1.0 if integer else RATE_PRECISION)
    try:
        plan = SearchPlan(args.search_min, args.search_max, integer, precision, sweep)
    except ValueError as e:
        parser.error(str(e))
    if not 0 < args.confidence_level < 1:
        parser.error(f"--confidence-level: between 0 and 1, got {args.confidence_level}")
    counted = bool(args.request_count or args.num_conversations)  # each step runs its count
    if args.artifact_dir is None:
        args.artifact_dir = unused_default(args, f"{args.endpoint_type}-search-{parameter}")
    made = local_plan(args, parser)
    if made is None:
        return verdict.USAGE
    base, _ = made
    search = Search(
        parameter,
        objectives,
        plan,
        base,
        base.artifact_dir,
        args.confidence_level,
        None if counted else args.max_step_duration,
    )

    async def go() -> int:
        code = await run_search(search, sys.stdout)
        if (results := base.artifact_dir / "search_results.json").exists():
            print(f"Search results: {results}")
        if args.report:  # every step compared, beside search_results.json
            write_runs_report(base.artifact_dir, "step*", base.artifact_dir)
        return code

    return run_sync(go)


def _sweep(parser: argparse.ArgumentParser, text: str | None, integer: bool) -> list[float] | None:
    if text is None:
        return None
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        parser.error(f"--sweep: expected numbers separated by commas, got {text!r}")
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        parser.error(f"--sweep: expected loads above 0, got {text!r}")
    if integer and any(v != int(v) for v in values):
        parser.error(f"--sweep: a concurrency is a whole number, got {text!r}")
    return values
