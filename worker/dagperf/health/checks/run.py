"""What the checks read of a run: each record of `profile_export.jsonl`, the load in its summary,
and `Run`, what every check is made with before the first record.

A record decodes into msgspec structs holding only the fields some check reads; the decoder
skips the rest without building it, so a record costs what the checks use of it, and a
directory written by another version, with fields more or fewer, still reads.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import msgspec

from dagperf.health.report import HealthOptions
from dagperf.verdict import DEFAULT_MAX_ERROR_RATE


class Value(msgspec.Struct):
    value: float | None = None


class Metrics(msgspec.Struct):
    output_sequence_length: Value | None = None


class Metadata(msgspec.Struct):
    x_request_id: str
    request_start_ns: int | None = None
    request_ack_ns: int | None = None
    request_end_ns: int | None = None
    x_correlation_id: str | None = None
    root_correlation_id: str | None = None
    turn_count: int | None = None  # turns of its conversation
    depends_on: list[str] = []
    dependents: int | None = None  # requests naming this one in their depends_on
    delay_ms: float = 0.0
    max_tokens: Any = None  # whatever the body carried; only a positive number is used
    ignore_eos: bool = False
    was_cancelled: bool = False
    token_count_source: str | None = None
    finish_reason: str | None = None  # why the reply ended, in chat's words
    cut: dict[str, Any] | None = None  # cut short by the run: what was seen of it


class Record(msgspec.Struct):
    metadata: Metadata
    metrics: Metrics | None = None
    error: dict[str, Any] | None = None


class Load(msgspec.Struct):
    """The part of the run's LoadConfig the checks need; other fields are ignored, so
    directories written by other versions still read."""

    concurrency: int | None = None
    request_rate: float | None = None
    arrival_cv: float | None = None  # gaps' coefficient of variation; None: Poisson (1)
    fixed_schedule: bool = False
    max_inflight: int | None = None


@dataclass(frozen=True)
class Run:
    """What the checks know before the first record: their tolerances, the load the run was
    asked for and the error rate it allowed (both from its summary)."""

    options: HealthOptions = field(default_factory=HealthOptions)
    load: Load = field(default_factory=Load)
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE


def compact_id(ident: str) -> bytes | str:
    """A compact dict key for a request or conversation id: the 16 bytes of a uuid, or the
    string itself."""
    try:
        return uuid.UUID(ident).bytes
    except ValueError:
        return ident
