"""Where a run's requests come from, each way into the one request graph the scheduler runs.

A dataset file has a type (`--custom-dataset-type`); a synthetic workload is a session config
(`--session-config`). Either is read, validated and compiled here, and a problem surfaces as a
`DatasetError` listing every problem found, by file and line or field.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from dagperf.config import LoadConfig
from dagperf.dataset.loader import DatasetError, Problem, load_file, parse_stream
from dagperf.graph import RequestGraph, SessionKind

Compile = Callable[[Iterable[bytes], str], RequestGraph]


@dataclass(frozen=True)
class ReadOptions:
    """What a run tells the formats that read more than their file; the defaults are what
    `validate` and the operator's check use."""

    draws: int | None = None  # random_pool: requests drawn (None: AIPerf's 100)
    seed: int | None = None  # random_pool: the draws' seed (None: fresh draws)
    count_tokens: Callable[[list[str]], list[int]] | None = None  # sharegpt (None: estimates)


class Reader(NamedTuple):
    """A reader imported when first used, and the ReadOptions fields it takes."""

    module: str
    name: str
    options: tuple[str, ...] = ()

    def __call__(self, *args: Any, options: ReadOptions | None = None) -> Any:
        given = options or ReadOptions()
        kwargs = {field: getattr(given, field) for field in self.options}
        return getattr(importlib.import_module(self.module), self.name)(*args, **kwargs)


def _dag_jsonl(lines: Iterable[bytes], source: str) -> RequestGraph:
    from dagperf.dataset.formats.dag_jsonl import read_dag_jsonl
    from dagperf.graph import compile_dag_jsonl

    return compile_dag_jsonl(read_dag_jsonl(lines, source))


def _session_graph(lines: Iterable[bytes], source: str) -> RequestGraph:
    from dagperf.dataset.formats.session_graph import read_session_graph

    return _compile(source, read_session_graph(lines, source), None)


def _read_with(reader: Reader, options: ReadOptions | None = None) -> Compile:
    """A format whose reader takes ReadOptions, with these options."""
    return lambda lines, source: _from_trace(source, reader(lines, source, options=options))


def _from_trace(source: str, trace: Any) -> RequestGraph:
    return _compile(source, trace.specs, trace.loader_mode, trace.warmup)


def _compile(source: str, specs: list[Any], loader_mode: Any, warmup: Any = ()) -> RequestGraph:
    from dagperf.graph.sessions import SpecError, compile_sessions

    try:
        return compile_sessions(source, specs, loader_mode, warmup)
    except SpecError as e:  # the loaders check first; this is the last word, not a traceback
        raise DatasetError([Problem(source, None, str(e))]) from None


POOL = Reader("dagperf.dataset.formats.random_pool", "read_random_pool", ("draws", "seed"))
SHAREGPT = Reader("dagperf.dataset.formats.sharegpt", "read_sharegpt", ("count_tokens",))
# The formats whose reader returns a TraceDataset, each imported when first used: the formats a
# run does not read cost it nothing.
TRACE_READERS = {
    "mooncake_trace": Reader("dagperf.dataset.formats.mooncake_trace", "read_mooncake_trace"),
    "timed_synthetic_session": Reader(
        "dagperf.dataset.formats.timed_synthetic_session", "read_timed_sessions"
    ),
    "single_turn": Reader("dagperf.dataset.formats.single_turn", "read_single_turn"),
    "multi_turn": Reader("dagperf.dataset.formats.multi_turn", "read_multi_turn"),
    "raw_payload": Reader("dagperf.dataset.formats.raw_payload", "read_raw_payload"),
    "request_log": Reader("dagperf.dataset.formats.request_log", "read_request_log"),
    "untimed_content_multi_turn": Reader(
        "dagperf.dataset.formats.untimed_content_multi_turn", "read_conversations"
    ),
    "shared_prefix": Reader("dagperf.dataset.formats.shared_prefix", "read_shared_prefix"),
    "rag": Reader("dagperf.dataset.formats.rag", "read_rag"),
    "random_pool": POOL,
    "sharegpt": SHAREGPT,
}
FILE_TYPES: dict[str, Compile] = {
    "dag_jsonl": _dag_jsonl,
    "session_graph": _session_graph,
    **{kind: _read_with(reader) for kind, reader in TRACE_READERS.items()},
}
DIRECTORY_TYPES = {  # the types that read a directory
    "raw_payload": Reader(
        "dagperf.dataset.formats.raw_payload", "load_raw_payload_dir"
    ),  # file: session
    "random_pool": Reader(
        "dagperf.dataset.formats.random_pool", "load_random_pool_dir", POOL.options
    ),
}


def _compiler(dataset_type: str, options: ReadOptions | None) -> Compile:
    reader = TRACE_READERS.get(dataset_type)
    if reader is None or not reader.options:  # nothing a run's options change
        return FILE_TYPES[dataset_type]
    return _read_with(reader, options)


def load_graph(
    path: str | Path,
    dataset_type: str,
    source: str | None = None,
    options: ReadOptions | None = None,
) -> RequestGraph:
    if Path(path).is_dir():
        if dataset_type not in DIRECTORY_TYPES:
            reason = f"a directory; only {' and '.join(DIRECTORY_TYPES)} read one"
            raise DatasetError([Problem(source or str(path), None, reason)])
        trace = DIRECTORY_TYPES[dataset_type](Path(path), options=options)
        return _from_trace(source or str(path), trace)
    return load_file(path, _compiler(dataset_type, options), source)


def parse_graph(stream: BinaryIO, source: str, dataset_type: str) -> RequestGraph:
    return parse_stream(stream, source, FILE_TYPES[dataset_type])


SESSION_CONFIG = "session_config"  # a Benchmark's dataset type for a synthetic session config


def synthetic_graph(config_path: str | Path) -> RequestGraph:
    """The sessions a session config file generates; its errors become a DatasetError."""
    from dagperf.synthetic import load_session_config

    return _generated(str(config_path), lambda: load_session_config(config_path))


def parse_synthetic_graph(text: bytes, source: str) -> RequestGraph:
    """The sessions a session config held in memory generates (a ConfigMap's key)."""
    from dagperf.synthetic import read_session_config

    return _generated(source, lambda: read_session_config(text, source))


def _generated(source: str, read: Callable[[], Any]) -> RequestGraph:
    from dagperf.synthetic import ConfigError, generate_sessions
    from dagperf.synthetic.outcomes import LmevalSource, TraceSource

    try:
        config = read()
        if isinstance(config, LmevalSource):  # a Veeksha lmeval generator: its tasks' documents
            from dagperf.synthetic.lmeval import lmeval_sessions

            specs = lmeval_sessions(config)
    except ConfigError as e:
        raise DatasetError([Problem(e.source, None, p) for p in e.problems]) from None
    cancel = config.cancel_session_on_failure  # the config's own word on the load
    if isinstance(config, LmevalSource):
        graph = _compile(source, specs, None)
    elif isinstance(config, TraceSource):  # a Veeksha trace generator: its file, by its flavour
        if config.read is None:
            graph = load_graph(config.path, config.dataset_type)
        else:
            read_trace = config.read
            graph = load_file(
                config.path, lambda lines, src: _from_trace(src, read_trace(lines, src))
            )
    else:
        graph = _compile(source, generate_sessions(config), None)
    return dataclasses.replace(graph, cancel_session_on_failure=cancel)


def timed(graph: RequestGraph) -> bool:
    """Every root has a start time: the dataset can run on its own schedule."""
    return all(tree.start_s is not None for tree in graph.trees)


def resolve_schedule(load: LoadConfig, graph: RequestGraph) -> LoadConfig:
    """A timed dataset runs on its schedule unless a concurrency or rate is asked for (or
    --no-fixed-schedule); --fixed-schedule on a dataset without times is a ValueError."""
    if load.fixed_schedule is None:
        auto = timed(graph) and not load.concurrency and not load.request_rate
        return load.model_copy(update={"fixed_schedule": auto})
    if load.fixed_schedule and not timed(graph):
        raise ValueError("--fixed-schedule needs a start time for every session (trace timestamps)")
    return load


def resolve_cancel(load: LoadConfig, graph: RequestGraph) -> LoadConfig:
    """--[no-]cancel-session-on-failure, or else what the session config says, or else off."""
    if load.cancel_session_on_failure is not None:
        return load
    return load.model_copy(
        update={"cancel_session_on_failure": bool(graph.cancel_session_on_failure)}
    )


def summary(graph: RequestGraph) -> dict[str, int]:
    """What `dagperf validate` prints about a graph."""
    out = {
        "conversations": graph.shape.conversations,
        "roots": graph.root_count,
        "requests per run": graph.request_count,
        "max agent depth": graph.max_depth,
        "FORK children": graph.child_count(SessionKind.FORK),
        "SPAWN children": graph.child_count(SessionKind.SPAWN),
    }
    if timed(graph):
        out["timed sessions"] = graph.root_count
    if graph.warmup:  # sent before measuring, not part of a run's requests
        out["warm-up requests"] = sum(len(tree.nodes) for tree in graph.warmup)
    return out
