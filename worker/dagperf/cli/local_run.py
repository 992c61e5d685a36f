"""A run on this machine (`dagperf profile`, and each step of `dagperf search`): its flags, the
launch of its processes, checked before the dataset is read, and its plan."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dagperf.cli.flags import (
    add_model_flags,
    default_workers,
    keys_flag,
    model_from_flags,
    role_keys,
)
from dagperf.cli.plan import endpoint_fields, planned
from dagperf.cli.run_options import RunOptions, run_flags, run_options
from dagperf.simulator import SimConfig
from dagperf.vocabulary.keys import load_scheduler_keys
from dagperf.vocabulary.options import as_flags

if TYPE_CHECKING:
    from dagperf.local_processes import Launch
    from dagperf.profile import LocalPlan


def local_flags(parser: argparse.ArgumentParser) -> None:
    """Every flag of `dagperf profile` (`dagperf search` takes them all too)."""
    run_flags(parser, url_required=False)
    parser.add_argument(
        "--workers",
        type=int,
        default=default_workers(),
        metavar="N",
        help="worker processes (default: %(default)s, from this machine's cores)",
    )
    keys_flag(
        parser.add_argument_group("keys"),
        "its control token is the one POST /stop must present",
        ", else a key set made for this run alone",
    )
    add_model_flags(parser, SimConfig, "built-in simulator (used without --url)", prefix="sim-")


@dataclass(frozen=True)
class LocalRun:
    """A local run's options, checked before its dataset is read."""

    options: RunOptions
    endpoint: dict[str, Any]  # EndpointConfig fields; `url` and `model` may still be None
    launch: Launch


def checked(args: argparse.Namespace, parser: argparse.ArgumentParser) -> LocalRun:
    """The options that need no dataset, each checked (a bad one is a usage error)."""
    from dagperf.local_processes import Launch

    options = run_options(parser, args)
    endpoint = endpoint_fields(parser, options)
    if args.workers < 1:
        parser.error("--workers: must be at least 1")
    sim = model_from_flags(parser, args, SimConfig, prefix="sim_")
    if args.keys is not None:
        role_keys(parser, args, load_scheduler_keys)  # a bad key set is a usage error
    launch = Launch(
        args.workers,
        options.endpoint.url,
        options.endpoint.endpoint,
        endpoint["api_key"],
        args.keys,
        options.log.log_format,
        simulator_args=tuple(as_flags(sim, local=True)),
    )
    return LocalRun(options, endpoint, launch)


def local_plan(
    args: argparse.Namespace, parser: argparse.ArgumentParser, run: LocalRun | None = None
) -> LocalPlan | None:
    """A local run from its flags, every one checked before the run starts; None after
    printing the dataset's problems."""
    from dagperf.profile import LocalPlan

    run = run or checked(args, parser)
    plan = planned(parser, run.options, args.workers)
    if plan is None:
        return None
    return LocalPlan(
        graph=plan.graph,
        endpoint=run.endpoint,
        load=plan.load,
        launch=run.launch,
        artifact_dir=plan.artifact_dir,
        input_config=plan.input_config,
        scheduler_options=plan.settings,
    )
