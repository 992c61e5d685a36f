"""Where a run's requests come from, each way into the one request graph the scheduler runs.

A dataset file has a type (`--custom-dataset-type`); a synthetic workload is a session config
(`--session-config`). Either is read, validated and compiled here, and a problem surfaces as a
`DatasetError` listing every problem found, by file and line or field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from dagperf.dataset.formats import FORMATS, ReadOptions
from dagperf.dataset.loader import DatasetError, Problem, load_file, parse_stream
from dagperf.dataset.specs import TraceDataset
from dagperf.graph import RequestGraph, SessionKind
from dagperf.load import timed

if TYPE_CHECKING:
    from dagperf.dataset.formats.dag_jsonl import DagDataset

Compile = Callable[[Iterable[bytes], str], RequestGraph]


def compiler(dataset_type: str, options: ReadOptions | None = None) -> Compile:
    """A file of `dataset_type` read (with a run's `options`) and compiled into the graph."""
    read, given = FORMATS[dataset_type].read, options or ReadOptions()
    return lambda lines, source: _compiled(source, read(lines, source, given))


def _compiled(source: str, dataset: TraceDataset | DagDataset) -> RequestGraph:
    """The graph of what a format read: the compiling lives here, above both the dataset layer
    and the graph's compilers, so a format's module never depends on the graph."""
    if isinstance(dataset, TraceDataset):
        shape = (dataset.warmup, dataset.known, dataset.inputs_json)
        return _compile(source, dataset.specs, dataset.loader_mode, *shape)
    from dagperf.graph import compile_dag_jsonl

    return compile_dag_jsonl(dataset)


def _compile(
    source: str,
    specs: Any,
    loader_mode: Any,
    warmup: Any = (),
    known: Any = None,
    inputs_json: bool = True,
) -> RequestGraph:
    from dagperf.graph.sessions import SpecError, compile_sessions

    try:
        return compile_sessions(source, specs, loader_mode, warmup, known, inputs_json)
    except SpecError as e:  # the loaders check first; this is the last word, not a traceback
        raise DatasetError([Problem(source, None, str(e))]) from None


def load_graph(
    path: str | Path,
    dataset_type: str,
    source: str | None = None,
    options: ReadOptions | None = None,
) -> RequestGraph:
    if Path(path).is_dir():
        read_directory = FORMATS[dataset_type].read_directory
        if read_directory is None:
            readers = [kind for kind, form in FORMATS.items() if form.read_directory]
            listed = ", ".join(readers[:-1]) + f" and {readers[-1]}"
            reason = f"a directory; only {listed} read one"
            raise DatasetError([Problem(source or str(path), None, reason)])
        return _compiled(source or str(path), read_directory(Path(path), options or ReadOptions()))
    return load_file(path, compiler(dataset_type, options), source)


def parse_graph(stream: BinaryIO, source: str, dataset_type: str) -> RequestGraph:
    return parse_stream(stream, source, compiler(dataset_type))


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
                config.path, lambda lines, src: _compiled(src, read_trace(lines, src))
            )
    else:
        graph = _compile(source, generate_sessions(config), None)
    return dataclasses.replace(graph, cancel_session_on_failure=cancel)


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
