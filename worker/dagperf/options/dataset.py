"""Which dataset a run reads, and how."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from dagperf.dataset.formats import FORMATS
from dagperf.vocabulary.options import Option

_FILE = (
    "a Benchmark names its file by dataset.configMapRef, dataset.url or "
    "dataset.persistentVolumeClaim, which the operator mounts"
)


class DatasetOptions(BaseModel):
    """The dataset file, or a synthetic session config, and its format."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_file: Annotated[str | None, Option(metavar="FILE", local=_FILE)] = Field(
        default=None,
        description="The dataset file, or an http(s) URL of one (with --input-sha256).",
    )
    input_sha256: Annotated[str | None, Option(metavar="HEX", local="dataset.url.sha256")] = Field(
        default=None,
        description="The SHA-256 the dataset file must have: required for a URL, checked before "
        "the file is read.",
    )
    custom_dataset_type: Annotated[
        str, Option(benchmark="type", choices=lambda: tuple(FORMATS))
    ] = Field(default="dag_jsonl", description="Its format.")
    use_think_time_only: bool = Field(
        default=False,
        description="Agent traces (weka_trace, tracelab): wait each recorded call's think_time "
        "before it, not the idle gap between the calls (AIPerf's flag).",
    )
    session_config: Annotated[
        str | None, Option(metavar="FILE", local="dataset.type session_config: the file is one")
    ] = Field(
        default=None,
        description="Generate the sessions from this YAML/JSON config (graph shape, lengths, "
        "seed) instead of reading a dataset file.",
    )
    tokenizer: Annotated[
        str | None,
        Option(metavar="PATH", local="dataset.tokenizer: a ConfigMap key holding tokenizer.json"),
    ] = Field(
        default=None,
        description="A local tokenizer.json (or its directory) for token counts the server does "
        "not report; never downloaded (default: the server's usage, else estimates).",
    )
