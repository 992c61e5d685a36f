"""The simulator's knobs: one model, from which the `dagperf simulate` flags are generated."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class SimConfig(BaseModel):
    """How the simulated LLM behaves. Times are in milliseconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(default="dagperf-sim", min_length=1, description="Model name it serves.")
    ttft_ms: float = Field(
        default=20.0, ge=0, description="Time to first token for a fully cached prompt."
    )
    prefill_ms_per_token: float = Field(
        default=0.02,
        ge=0,
        description="Added to the time to first token per prompt token not in the prefix cache.",
    )
    itl_ms: float = Field(default=5.0, ge=0, description="Delay between output tokens.")
    output_tokens: int = Field(
        default=16,
        ge=1,
        description="Reply length where the model would stop by itself; max_tokens caps it, "
        "ignore_eos makes the reply exactly max_tokens, min_tokens sets a floor.",
    )
    reasoning_tokens: int = Field(
        default=0, ge=0, description="Reasoning tokens emitted before the content of each reply."
    )
    error_rate: float = Field(
        default=0.0, ge=0, le=1, description="Share of requests answered with an HTTP 500."
    )
    seed: int = Field(default=0, description="Seed for replies and injected errors.")
    block_size: int = Field(default=16, ge=1, description="Prefix-cache block size in tokens.")
    cache_blocks: int = Field(
        default=16384, ge=0, description="Prefix-cache capacity in blocks (LRU); 0 disables it."
    )
    max_concurrency: int | None = Field(
        default=None,
        ge=1,
        description="Requests served at once, like a server's batch slots; more wait for a free "
        "slot, first come first served, so latency rises sharply past this load (a knee for "
        "`dagperf search` to find). Default: no limit.",
    )
    slots: int | None = Field(
        default=None,
        ge=1,
        description="Serve like a continuous-batching engine with this many sequence slots: "
        "past them a request waits in line for its first token until a reply ends; the "
        "sequences in slots decode together, a token each per step of itl_ms (plus "
        "batch_itl_ms per other sequence), and a prefill holds the batch up. Default: off.",
    )
    batch_itl_ms: float = Field(
        default=0.0,
        ge=0,
        description="With --slots: added to a decode step for each other sequence decoding "
        "(a bigger batch decodes each of its tokens more slowly).",
    )
    strict_fields: bool = Field(
        default=False,
        description="Refuse a body field the API does not define (ignore_eos, min_tokens, ...) "
        "with HTTP 422, as transformers serve does.",
    )
    backends: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Simulated backends behind this port, each with its own prefix cache, "
        "slots and vLLM-named /backends/N/metrics; a response names its backend in x-backend.",
    )
    routing: Literal["sticky", "random"] = Field(
        default="sticky",
        description="How a request finds its backend: sticky on the affinity header (as a "
        "KV-aware router), or random.",
    )
    affinity_header: str = Field(
        default="X-Session-ID",
        min_length=1,
        description="The header sticky routing reads (vLLM Router's consistent_hash key).",
    )
    usage: bool = Field(
        default=True,
        description="Report token usage (some servers do not; clients must count themselves).",
    )
    api_key: str | None = Field(
        default=None,
        description="Answer 401 to /v1 requests that do not carry this bearer token.",
    )
    record_limit: int = Field(
        default=100_000,
        ge=0,
        description="Most recent requests kept in the request log served at /sim/records.",
    )
    record_bodies: bool = Field(
        default=False, description="Keep each request's body and headers in the request log."
    )

    @model_validator(mode="after")
    def _one_kind_of_slot(self) -> SimConfig:
        if self.slots is not None and self.max_concurrency is not None:
            raise ValueError(
                "slots (an engine's sequence slots) and max_concurrency (a whole reply per "
                "slot, no batching) are two models of the same limit: give one"
            )
        return self
