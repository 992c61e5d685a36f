"""The flags of the commands that run a benchmark, generated from the options models
(`dagperf.options`), and the options a command line gives, each checked before anything
starts. The few flags a command adds by hand are all local-only, each with its reason."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from dagperf.cli.flags import add_model_flags, model_from_flags
from dagperf.options import (
    CONCERNS,
    SEARCH,
    DatasetOptions,
    EndpointOptions,
    HealthOptions,
    LoadConfig,
    LogOptions,
    OutputOptions,
    RunsOptions,
    SearchOptions,
    ServerMetricsOptions,
    VerdictOptions,
)


@dataclass(frozen=True)
class RunOptions:
    """Every option of a run, by concern."""

    dataset: DatasetOptions
    endpoint: EndpointOptions
    load: LoadConfig
    health: HealthOptions
    verdict: VerdictOptions
    runs: RunsOptions
    server_metrics: ServerMetricsOptions
    output: OutputOptions
    log: LogOptions


def run_flags(parser: argparse.ArgumentParser, url_required: bool, **defaults: Any) -> None:
    """Every options model's flags; `defaults`: a command's own (the scheduler's metrics port)."""
    for concern in CONCERNS.values():
        add_model_flags(
            parser,
            concern.model,
            concern.title,
            concern.prefix,
            required=("url",) if url_required else (),
            defaults=defaults,
        )


def run_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> RunOptions:
    """The options the flags give, or a usage error naming the flag at fault."""
    given: dict[str, Any] = {
        name: model_from_flags(parser, args, concern.model, concern.prefix.replace("-", "_"))
        for name, concern in CONCERNS.items()
    }
    return RunOptions(**given)


def search_flags(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser, SEARCH.model, SEARCH.title, required=("slo",))


def search_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> SearchOptions:
    return model_from_flags(parser, args, SearchOptions)
