"""Weka's coding-agent trace, as AIPerf 0.13 reads it: one session per JSON document.

    {"id": "s1", "models": ["opus"], "block_size": 64, "hash_id_scope": "local",
     "tool_tokens": 900, "system_tokens": 300,
     "requests": [
       {"type": "n", "t": 0.0, "model": "opus", "in": 1800, "out": 200, "hash_ids": [1, 2, ...],
        "api_time": 2.1},
       {"type": "subagent", "t": 4.0, "agent_id": "agent_001", "subagent_type": "Explore",
        "status": "completed", "duration_ms": 5000, "models": ["haiku"],
        "requests": [{"type": "s", "t": 4.5, "model": "haiku", "in": 700, "out": 50, ...}]},
       {"type": "s", "t": 10.0, "model": "opus", "in": 2600, "out": 150, "hash_ids": [...]}]}

A request is a normal (`"n"`) or streaming (`"s"`) API call, the latter with its recorded `ttft`;
a `subagent` entry holds its sub-agent's own calls. Times are seconds from the session's start
(a sub-agent's calls may be given relative to its entry's `t`). The structs decode a document in
one C pass; the models word what the structs refuse, every problem with its path. Both refuse
unknown keys and values of the wrong JSON type (AIPerf takes `"in": "100"`), and negative counts
and times, which no recording holds.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

from dagperf.dataset.limits import MAX_PROMPT_TOKENS, MAX_TOKENS

Tokens = Annotated[int, Meta(ge=0, le=MAX_PROMPT_TOKENS)]
Seconds = Annotated[float, Meta(ge=0)]
Text = Annotated[str, Meta(min_length=1)]
_RENAMED = {"tokens_in": "in", "tokens_out": "out"}


class Call(
    Struct, tag_field="type", tag="n", forbid_unknown_fields=True, frozen=True, rename=_RENAMED
):
    t: Seconds
    model: str
    tokens_in: Tokens
    tokens_out: Annotated[int, Meta(ge=0, le=MAX_TOKENS)]
    hash_ids: list[int] = []
    input_types: list[str] = []
    output_types: list[str] = []
    stop: str = ""
    api_time: float | None = None
    think_time: float | None = None


class Streamed(Call, tag="s", frozen=True, gc=False):
    ttft: float | None = None


class Subagent(Struct, tag_field="type", tag="subagent", forbid_unknown_fields=True, frozen=True):
    t: Seconds
    agent_id: Text
    subagent_type: str
    status: str
    requests: list[Call | Streamed]
    models: list[str]
    duration_ms: int | None = None
    total_tokens: int | None = None
    tool_use_count: int | None = None
    tool_tokens: Tokens = 0
    system_tokens: Tokens = 0


class Trace(Struct, forbid_unknown_fields=True, frozen=True):
    id: Text
    models: list[str]
    block_size: Annotated[int, Meta(gt=0, le=MAX_PROMPT_TOKENS)]
    hash_id_scope: Literal["local"]
    requests: list[Call | Streamed | Subagent]
    tool_tokens: Tokens = 0
    system_tokens: Tokens = 0
    totals: dict[str, Any] | None = None


# --- the same, as pydantic models: their errors say what is wrong, and where ----------------

_Count = Annotated[StrictInt, Field(ge=0, le=MAX_PROMPT_TOKENS)]
_Time = Annotated[float, Field(ge=0, strict=True, allow_inf_nan=False)]
_Strict = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class CallModel(BaseModel):
    model_config = _Strict

    type: Literal["n"]
    t: _Time = Field(description="Start, in seconds from the session's start.")
    model: StrictStr = Field(description="The model the call went to.")
    tokens_in: _Count = Field(alias="in", description="Prompt tokens.")
    tokens_out: Annotated[StrictInt, Field(ge=0, le=MAX_TOKENS)] = Field(
        alias="out", description="Reply tokens."
    )
    hash_ids: list[StrictInt] = Field(default_factory=list, description="KV-cache block ids.")
    input_types: list[StrictStr] = Field(default_factory=list)
    output_types: list[StrictStr] = Field(default_factory=list)
    stop: StrictStr = ""
    api_time: StrictFloat | StrictInt | None = Field(default=None, description="Server seconds.")
    think_time: StrictFloat | StrictInt | None = Field(
        default=None, description="Seconds the client waited before it."
    )


class StreamedModel(CallModel):
    type: Literal["s"]  # type: ignore[assignment]
    ttft: StrictFloat | StrictInt | None = Field(default=None, description="Seconds to 1st token.")


class SubagentModel(BaseModel):
    model_config = _Strict

    type: Literal["subagent"]
    t: _Time
    agent_id: StrictStr = Field(min_length=1)
    subagent_type: StrictStr
    status: StrictStr
    requests: list[Annotated[CallModel | StreamedModel, Field(discriminator="type")]]
    models: list[StrictStr]
    duration_ms: StrictInt | None = None
    total_tokens: StrictInt | None = None
    tool_use_count: StrictInt | None = None
    tool_tokens: _Count = 0
    system_tokens: _Count = 0


class TraceModel(BaseModel):
    model_config = _Strict

    id: StrictStr = Field(min_length=1, description="The session's id.")
    models: list[StrictStr]
    block_size: Annotated[StrictInt, Field(gt=0, le=MAX_PROMPT_TOKENS)]
    hash_id_scope: Literal["local"]
    requests: list[
        Annotated[CallModel | StreamedModel | SubagentModel, Field(discriminator="type")]
    ]
    tool_tokens: _Count = 0
    system_tokens: _Count = 0
    totals: dict[str, Any] | None = None


UNION_TAGS = frozenset({"n", "s", "subagent"})  # pydantic names the member it tried
