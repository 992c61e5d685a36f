"""What a run is, from its options: the graph its dataset makes, its load resolved against that
graph, the endpoint's fields and the scheduler's settings, each checked before anything starts
(a bad one is a usage error), and what the exports record of them."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagperf.cli.artifacts import artifact_dir_for, ensure_writable
from dagperf.cli.run_options import RunOptions
from dagperf.dataset import DatasetError
from dagperf.dataset.formats import FORMATS, ReadOptions
from dagperf.fetch import FetchError, is_url, local_copy, shown
from dagperf.graph import RequestGraph
from dagperf.load import LoadError, resolve_load
from dagperf.options import DatasetOptions
from dagperf.sources import load_graph, synthetic_graph
from dagperf.vocabulary.config import LoadConfig, api_key_problem

log = logging.getLogger("dagperf")


def read_graph(
    parser: argparse.ArgumentParser,
    dataset: DatasetOptions,
    out: typing.TextIO = sys.stderr,
    options: ReadOptions | None = None,
) -> RequestGraph | None:
    """The graph the options name, or None after printing every problem with it."""
    path, config = dataset.input_file, dataset.session_config
    if (path is None) == (config is None):
        parser.error("give a dataset file or --session-config FILE (one of them)")
    kind = "session config" if config else dataset.custom_dataset_type
    named = config or path or ""
    if not is_url(named) and not os.path.lexists(named):
        print(f"dagperf: no such file: {named}", file=out)  # nothing else to say about it
        return None
    try:
        if config:
            return synthetic_graph(config)
        with local_copy(named, dataset.input_sha256) as local:
            return load_graph(local, dataset.custom_dataset_type, shown(named), options)
    except FetchError as e:
        print(f"dagperf: {e}", file=out)
        return None
    except DatasetError as e:
        for problem in e.problems:
            print(problem, file=out)
        print(f"{named}: invalid {kind}, {len(e.problems)} problem(s)", file=out)
        return None


@dataclass(frozen=True)
class Planned:
    """A run's dataset read and its files' place checked: all a role needs to start."""

    graph: RequestGraph
    load: LoadConfig  # resolved against the graph
    artifact_dir: Path
    settings: dict[str, Any]  # the scheduler's (`scheduler_options`)
    input_config: dict[str, Any]  # what the exports record of the inputs


def planned(
    parser: argparse.ArgumentParser,
    options: RunOptions,
    workers: int,
    out: typing.TextIO = sys.stderr,
) -> Planned | None:
    """The run's graph, load and artifact directory (made, and written in: a run whose results
    cannot be kept should not begin), or None after printing the dataset's problems on `out`."""
    tokenizer = tokenizer_json(parser, options)
    loaded = graph_and_load(parser, options, tokenizer, out)
    if loaded is None:
        return None
    graph, load = loaded
    artifact_dir = artifact_dir_for(options, load)
    settings = scheduler_options(options, artifact_dir, tokenizer)
    ensure_writable(parser, artifact_dir)
    inputs = recorded_inputs(options, load, workers, settings)
    return Planned(graph, load, artifact_dir, settings, inputs)


def graph_and_load(
    parser: argparse.ArgumentParser,
    options: RunOptions,
    tokenizer_json: str | None,
    out: typing.TextIO = sys.stderr,
) -> tuple[RequestGraph, LoadConfig] | None:
    load = options.load
    graph = read_graph(parser, options.dataset, out, _read_options(options, tokenizer_json))
    if graph is None:
        return None
    try:
        resolved = resolve_load(load, graph)
    except LoadError as e:
        parser.error(str(e))
    if resolved.num_conversations != load.num_conversations:
        log.info(
            "No request count or conversation count provided; defaulting --num-conversations "
            "to %d (run each root in the file once). Use --request-count for a literal "
            "wire-request cap instead.",
            resolved.num_conversations,
        )
    return graph, resolved


def _read_options(options: RunOptions, tokenizer_json: str | None) -> ReadOptions:
    """What a run's options tell the formats that read more than their file: random_pool draws
    as many requests as AIPerf sizes its pool (--num-conversations, else --request-count),
    seeded by --random-seed; sharegpt counts tokens with --tokenizer; agent traces build
    prompts in its tokens."""
    takes = FORMATS[options.dataset.custom_dataset_type].takes
    count_tokens = None
    if "count_tokens" in takes and tokenizer_json is not None:
        from dagperf.vocabulary.tokens import TokenCounter

        count_tokens = TokenCounter(tokenizer_json).count_all
    load = options.load
    return ReadOptions(
        draws=load.num_conversations or load.request_count,
        seed=load.random_seed,
        count_tokens=count_tokens,
        tokenizer_json=tokenizer_json if "tokenizer_json" in takes else None,
        think_time_only=options.dataset.use_think_time_only,
    )


def tokenizer_json(parser: argparse.ArgumentParser, options: RunOptions) -> str | None:
    """--tokenizer's file, read now: a missing or broken one is a usage error."""
    if options.dataset.tokenizer is None:
        return None
    from dagperf.vocabulary.tokens import TokenizerError, read_tokenizer

    try:
        return read_tokenizer(options.dataset.tokenizer)
    except TokenizerError as e:
        parser.error(f"--tokenizer: {e}")


def endpoint_fields(parser: argparse.ArgumentParser, options: RunOptions) -> dict[str, Any]:
    """EndpointConfig's fields (`url` and `model` may still be None): the API key from the
    environment without --api-key, and the body fields the dataset's format asks for (an agent
    trace's ignore_eos) under --extra-inputs, on the APIs whose servers take them."""
    endpoint, kind = options.endpoint, options.dataset.custom_dataset_type
    only = FORMATS[kind].endpoint_type
    if only is not None and endpoint.endpoint_type != only:
        parser.error(
            f"--custom-dataset-type {kind}: its lines are {only} request bodies; "
            f"use --endpoint-type {only}"
        )
    format_inputs = FORMATS[kind].extra_inputs if endpoint.endpoint_type in _BODY_FIELDS else {}
    key = endpoint.api_key.get_secret_value() if endpoint.api_key else None
    if key is None:  # --api-key's own is checked as it is parsed
        key = os.environ.get("OPENAI_API_KEY", "").strip() or None
        if key and (problem := api_key_problem(key)):
            parser.error(f"OPENAI_API_KEY: {problem}")
    return endpoint.model_dump() | {
        "api_key": key,
        "extra_inputs": dict(format_inputs) | endpoint.extra_inputs,
    }


_BODY_FIELDS = ("chat", "completions")  # the APIs whose servers take a format's body fields


def scheduler_options(
    options: RunOptions, artifact_dir: Path, tokenizer_json: str | None
) -> dict[str, Any]:
    """The scheduler's settings from the options: metrics, reporting and the verdict."""
    from dagperf.exports.server_metrics import ScrapeTargets

    output, scrape = options.output, options.server_metrics
    return {
        "goodput": options.verdict.goodput or None,
        "tokenizer_json": tokenizer_json,
        "benchmark": output.benchmark_name or artifact_dir.name,
        "metrics_port": output.metrics_port,
        "metrics_host": output.metrics_host,
        "metrics_linger_s": output.metrics_linger,
        "summary_file": output.summary_file,
        "max_error_rate": options.verdict.max_error_rate,
        "slice_duration_s": options.runs.slice_duration,
        "scrape": ScrapeTargets(tuple(scrape.server_metrics_url), scrape.server_metrics_interval)
        if scrape.server_metrics_url
        else None,
    }


def recorded_inputs(
    options: RunOptions, load: LoadConfig, workers: int, settings: dict[str, Any]
) -> dict[str, Any]:
    """What the exports record of the run's inputs."""
    dataset, tokenizer = options.dataset, options.dataset.tokenizer
    return {
        "dataset": {"path": shown(str(dataset.input_file)), "type": dataset.custom_dataset_type}
        if dataset.input_file
        else {"path": str(dataset.session_config), "type": "synthetic"},
        "load": load.model_dump(mode="json"),
        "workers": workers,
        "tokenizer": str(Path(tokenizer).resolve()) if tokenizer else None,
        "goodput": settings["goodput"],
        "max_error_rate": settings["max_error_rate"],  # what the run (and its health) judged on
    }
