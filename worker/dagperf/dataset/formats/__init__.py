"""The dataset formats: one module per `--custom-dataset-type`, named for it (dag_jsonl's reader
is a package), and `FORMATS`, the table of them. The CLI's choices, `dagperf validate`, the
Benchmark CRD's enum and the reading of a file all take the formats from this table.

A format's reader turns a file's lines into what `dagperf.graph` compiles: a `TraceDataset`
(sessions of small DAGs: every format but one) or dag_jsonl's `DagDataset`. Each entry reads
through a small function below that imports its module when the format is first read, so a
process pays only for the format it reads: importing every reader takes about 0.13 s (pydantic
builds each row model), and every worker process imports the CLI, whose choices are this table.
The functions are typed, so mypy checks each call and import-linter sees each import.

A new format is a module here and an entry in `FORMATS` with its reading function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagperf.dataset.specs import TraceDataset

if TYPE_CHECKING:
    from dagperf.dataset.formats.agent_traces import Replay
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

    def replay(self) -> Replay:
        """What an agent trace's replay takes of them."""
        from dagperf.dataset.formats.agent_traces import Replay

        return Replay(self.tokenizer_json, self.seed, self.think_time_only)


@dataclass(frozen=True)
class Format:
    """One `--custom-dataset-type`: how a file of it is read, and what else a run must know."""

    read: Callable[[Lines, str, ReadOptions], TraceDataset | DagDataset]
    takes: tuple[str, ...] = ()  # the ReadOptions it reads: a run's flags change what it reads
    read_directory: Callable[[Path, ReadOptions], TraceDataset] | None = None  # files: one dataset
    endpoint_type: str | None = None  # its lines are request bodies of this API, sent as written
    # Body fields its requests carry unless --extra-inputs says otherwise, on the APIs whose
    # servers take them (chat and completions).
    extra_inputs: dict[str, Any] = field(default_factory=dict)


def _dag_jsonl(lines: Lines, source: str, options: ReadOptions) -> DagDataset:
    from dagperf.dataset.formats.dag_jsonl import read_dag_jsonl

    return read_dag_jsonl(lines, source)


def _session_graph(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.session_graph import read_session_graph

    return TraceDataset(read_session_graph(lines, source), None, timed=False)


def _mooncake_trace(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.mooncake_trace import read_mooncake_trace

    return read_mooncake_trace(lines, source)


def _timed_synthetic_session(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.timed_synthetic_session import read_timed_sessions

    return read_timed_sessions(lines, source)


def _single_turn(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.single_turn import read_single_turn

    return read_single_turn(lines, source)


def _multi_turn(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.multi_turn import read_multi_turn

    return read_multi_turn(lines, source)


def _raw_payload(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.raw_payload import read_raw_payload

    return read_raw_payload(lines, source)


def _raw_payload_dir(directory: Path, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.raw_payload import load_raw_payload_dir

    return load_raw_payload_dir(directory)  # each file one session


def _request_log(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.request_log import read_request_log

    return read_request_log(lines, source)


def _untimed_content_multi_turn(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.untimed_content_multi_turn import read_conversations

    return read_conversations(lines, source)


def _shared_prefix(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.shared_prefix import read_shared_prefix

    return read_shared_prefix(lines, source)


def _rag(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.rag import read_rag

    return read_rag(lines, source)


def _random_pool(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.random_pool import read_random_pool

    return read_random_pool(lines, source, draws=options.draws, seed=options.seed)


def _random_pool_dir(directory: Path, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.random_pool import load_random_pool_dir

    return load_random_pool_dir(directory, draws=options.draws, seed=options.seed)  # file: pool


def _sharegpt(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.sharegpt import read_sharegpt

    return read_sharegpt(lines, source, count_tokens=options.count_tokens)


def _weka_trace(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.weka_trace import read_weka_trace

    return read_weka_trace(lines, source, options.replay())


def _weka_trace_dir(directory: Path, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.weka_trace import read_weka_directory

    return read_weka_directory(directory, options.replay())  # each *.json file a session


def _tracelab(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.tracelab import read_tracelab

    return read_tracelab(lines, source, options.replay())  # one file: AIPerf reads no directory


def _bailian_trace(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.bailian_trace import read_bailian_trace

    return read_bailian_trace(lines, source)


def _baseten_trace(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.baseten_trace import read_baseten_trace

    return read_baseten_trace(lines, source)  # a Parquet or Arrow IPC table, not lines


def _burst_gpt_trace(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.burst_gpt_trace import read_burst_gpt_trace

    return read_burst_gpt_trace(lines, source)


def _sagemaker_data_capture(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.sagemaker_data_capture import read_sagemaker_data_capture

    return read_sagemaker_data_capture(lines, source)


def _sagemaker_data_capture_dir(directory: Path, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.sagemaker_data_capture import load_sagemaker_dir

    return load_sagemaker_dir(directory)  # every *.jsonl below it: one trace


def _inputs_json(lines: Lines, source: str, options: ReadOptions) -> TraceDataset:
    from dagperf.dataset.formats.inputs_json import read_inputs_json

    return read_inputs_json(lines, source)


# An agent trace's replay: the run's tokenizer, its seed, --use-think-time-only; its replies are
# as long as recorded.
_AGENT_TRACE = ("tokenizer_json", "seed", "think_time_only")
_IGNORE_EOS = {"ignore_eos": True}

FORMATS: dict[str, Format] = {
    "dag_jsonl": Format(_dag_jsonl),
    "session_graph": Format(_session_graph),
    "mooncake_trace": Format(_mooncake_trace),
    "timed_synthetic_session": Format(_timed_synthetic_session),
    "single_turn": Format(_single_turn),
    "multi_turn": Format(_multi_turn),
    "raw_payload": Format(_raw_payload, read_directory=_raw_payload_dir, endpoint_type="chat"),
    "request_log": Format(_request_log),
    "untimed_content_multi_turn": Format(_untimed_content_multi_turn),
    "shared_prefix": Format(_shared_prefix),
    "rag": Format(_rag),
    "random_pool": Format(_random_pool, ("draws", "seed"), _random_pool_dir),
    "sharegpt": Format(_sharegpt, ("count_tokens",)),
    "bailian_trace": Format(_bailian_trace),
    "baseten_trace": Format(_baseten_trace),
    "burst_gpt_trace": Format(_burst_gpt_trace),
    "sagemaker_data_capture": Format(
        _sagemaker_data_capture, read_directory=_sagemaker_data_capture_dir
    ),
    "inputs_json": Format(_inputs_json),
    "weka_trace": Format(_weka_trace, _AGENT_TRACE, _weka_trace_dir, extra_inputs=_IGNORE_EOS),
    "tracelab": Format(_tracelab, _AGENT_TRACE, extra_inputs=_IGNORE_EOS),
}

__all__ = ["FORMATS", "Format", "Lines", "ReadOptions"]
