"""The dataset formats: one module per `--custom-dataset-type`, named for it (a package where
a format's reader is large), and `FORMATS`, the table of them. The CLI's choices, `dagperf
validate`, the Benchmark CRD's enum and the reading of a file all take the formats from this
table.

A format's reader turns a file's lines into what `dagperf.graph` compiles: a `TraceDataset`
(sessions of small DAGs: every format but one) or dag_jsonl's `DagDataset`. What several
formats share is in modules beside them that are no format (`rows`, `columns`, `agent_traces`),
and a format imports only those, never another format.

Each entry names its reader ("module:function", the module relative to this package), and
`Format.read` imports it when the format is first read, so a process pays only for the format it
reads: importing every reader takes about 0.13 s (pydantic builds each row model), and every
worker process imports the CLI, whose choices are this table. A reader is called with a file's
lines, its name for problems, and the run's options its entry `takes`, by their names in
`ReadOptions`. Being named, the readers are not seen by mypy or import-linter from here:
tests/test_formats.py imports each and holds its signature to its entry.

A new format is a module here and one entry in `FORMATS`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagperf.dataset.specs import TraceDataset

if TYPE_CHECKING:
    from dagperf.dataset.formats.dag_jsonl import DagDataset

Lines = Iterable[bytes]


@dataclass(frozen=True)
class ReadOptions:
    """What a run tells the formats that read more than their file; the defaults are what
    `validate` and the operator's check use."""

    draws: int | None = None  # random_pool: requests drawn (None: AIPerf's 100)
    seed: int | None = None  # random_pool: the draws' seed (None: fresh draws)
    count_tokens: Callable[[list[str]], list[int]] | None = None  # sharegpt (None: estimates)
    tokenizer_json: str | None = None  # agent traces: prompts counted in its tokens (else words)
    think_time_only: bool = False  # agent traces: wait each call's think time, not the gap


@dataclass(frozen=True)
class Format:
    """One `--custom-dataset-type`: where its readers are, and what else a run must know."""

    reader: str  # "module:function": (lines, source, **taken) -> TraceDataset | DagDataset
    takes: tuple[str, ...] = ()  # the ReadOptions its readers take: a run's flags change them
    directory_reader: str | None = None  # one that reads a directory: (path, **taken) -> one
    endpoint_type: str | None = None  # its lines are request bodies of this API, sent as written
    # Body fields its requests carry unless --extra-inputs says otherwise, on the APIs whose
    # servers take them (chat and completions).
    extra_inputs: dict[str, Any] = field(default_factory=dict)

    def read(self, lines: Lines, source: str, options: ReadOptions) -> TraceDataset | DagDataset:
        """A file's lines read as this format; `source` names the file in problems."""
        dataset: TraceDataset | DagDataset = imported(self.reader)(
            lines, source, **self._taken(options)
        )
        return dataset

    @property
    def read_directory(self) -> Callable[[Path, ReadOptions], TraceDataset] | None:
        """How a directory is read as this format (its files one dataset), if it is."""
        return None if self.directory_reader is None else self._read_directory

    def _read_directory(self, directory: Path, options: ReadOptions) -> TraceDataset:
        assert self.directory_reader is not None
        dataset: TraceDataset = imported(self.directory_reader)(directory, **self._taken(options))
        return dataset

    def _taken(self, options: ReadOptions) -> dict[str, Any]:
        return {name: getattr(options, name) for name in self.takes}


def imported(reader: str) -> Callable[..., Any]:
    """The function a `Format` names, its module imported now if no read has imported it."""
    module, _, name = reader.partition(":")
    function: Callable[..., Any] = getattr(importlib.import_module(module, __name__), name)
    return function


# An agent trace's replay: the run's tokenizer, its seed, --use-think-time-only; its replies are
# as long as recorded.
_AGENT_TRACE = ("tokenizer_json", "seed", "think_time_only")
_IGNORE_EOS = {"ignore_eos": True}

FORMATS: dict[str, Format] = {
    "dag_jsonl": Format(".dag_jsonl:read_dag_jsonl"),
    "session_graph": Format(".session_graph:read_session_graph"),
    "mooncake_trace": Format(".mooncake_trace:read_mooncake_trace"),
    "timed_synthetic_session": Format(".timed_synthetic_session:read_timed_sessions"),
    "single_turn": Format(".single_turn:read_single_turn"),
    "multi_turn": Format(".multi_turn:read_multi_turn"),
    "raw_payload": Format(
        ".raw_payload:read_raw_payload",
        directory_reader=".raw_payload:load_raw_payload_dir",  # each file one session
        endpoint_type="chat",
    ),
    "request_log": Format(".request_log:read_request_log"),
    "untimed_content_multi_turn": Format(".untimed_content_multi_turn:read_conversations"),
    "shared_prefix": Format(".shared_prefix:read_shared_prefix"),
    "rag": Format(".rag:read_rag"),
    "random_pool": Format(
        ".random_pool:read_random_pool",
        ("draws", "seed"),
        ".random_pool:load_random_pool_dir",  # each file a pool
    ),
    "sharegpt": Format(".sharegpt:read_sharegpt", ("count_tokens",)),
    "bailian_trace": Format(".bailian_trace:read_bailian_trace"),
    "baseten_trace": Format(".baseten_trace:read_baseten_trace"),  # a Parquet or Arrow table
    "burst_gpt_trace": Format(".burst_gpt_trace:read_burst_gpt_trace"),
    "sagemaker_data_capture": Format(
        ".sagemaker_data_capture:read_sagemaker_data_capture",
        directory_reader=".sagemaker_data_capture:load_sagemaker_dir",  # every *.jsonl below it
    ),
    "inputs_json": Format(".inputs_json:read_inputs_json"),
    "weka_trace": Format(
        ".weka_trace:read_weka_trace",
        _AGENT_TRACE,
        ".weka_trace:read_weka_directory",  # each *.json file a session
        extra_inputs=_IGNORE_EOS,
    ),
    # one file: AIPerf reads no directory of them
    "tracelab": Format(".tracelab:read_tracelab", _AGENT_TRACE, extra_inputs=_IGNORE_EOS),
}

__all__ = ["FORMATS", "Format", "Lines", "ReadOptions", "imported"]
