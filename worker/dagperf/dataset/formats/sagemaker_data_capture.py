"""AIPerf's `sagemaker_data_capture`: the JSON lines Amazon SageMaker's Data Capture writes for a
real-time endpoint, one captured request (and its response) per line, replayed as captured.

    {"captureData": {"endpointInput": {"data": "{\"messages\": [...], \"max_tokens\": 50}",
                                       "encoding": "JSON"},
                     "endpointOutput": {"data": "eyJ1c2FnZSI6...", "encoding": "BASE64"}},
     "eventMetadata": {"eventId": "abc-123", "inferenceTime": "2026-04-29T00:03:18Z"},
     "eventVersion": "0"}

A record is a conversation of one chat request: the captured request's `messages` and `tools`
sent as they were, its `max_tokens` (else `max_completion_tokens`) as the reply's limit, sent as
`max_completion_tokens` as AIPerf sends it on chat. Nothing else of the captured body is sent
(its temperature, its stream flag), as AIPerf sends nothing else: the run's flags say those.
Payloads are `JSON` text or `BASE64` (AIPerf's default when a record names no encoding); a
request in another encoding (CSV) or without `messages` is refused, as AIPerf refuses it
(only chat requests can be replayed); the response is read only for its `usage`, checked as
AIPerf checks it.

Timing: records arrive at their `inferenceTime` (ISO 8601; one without a zone is read as UTC)
on a fixed schedule, the earliest at 0, in time order (ties in file order). `--input-file` may be
a directory: every `*.jsonl` file in it or below it (Data Capture writes one per hour under
year/month/day/hour folders), read in path order as one trace.

The record's envelope is AWS's, so its other keys are ignored, as AIPerf ignores them; what
AIPerf stops on (a missing field, a payload that does not decode) is refused by line, every
problem in one pass. A message needs a `role` and `messages` an item, which AIPerf does not
check but no chat server takes otherwise.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from dagperf.dataset.content import with_roles
from dagperf.dataset.formats.columns import LIMIT_FIELD
from dagperf.dataset.limits import MAX_ARRIVAL_S, MAX_TOKENS, line_problem
from dagperf.dataset.loader import (
    DatasetError,
    Problem,
    Problems,
    jsonl_lines,
    load_file,
    object_lines,
)
from dagperf.dataset.specs import GraphNode, Payload, SessionSpec, TraceDataset
from dagperf.runtime.gcpause import gc_paused

UNIT = "one capture record per line"
_INT = TypeAdapter(int)


class CapturedRequest(BaseModel):
    """The part of a captured chat request that is replayed."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    max_tokens: Any = None
    max_completion_tokens: Any = None

    @field_validator("messages")
    @classmethod
    def _each_message_has_a_role(cls, messages: list[dict[str, Any]]) -> Any:
        return with_roles(messages)


class Captured(NamedTuple):
    source: str
    line: int
    event_id: str | None
    time_ms: float
    request: CapturedRequest
    limit: int | None


def read_sagemaker_data_capture(lines: Iterable[bytes], source: str) -> TraceDataset:
    """Validate one capture file given as byte lines; `source` names it in messages."""
    records = _records(lines, source)
    if not records:
        problem = Problem(source, None, "empty file: it needs at least one capture record")
        raise DatasetError([problem])
    return _dataset(records)


def load_sagemaker_dir(directory: Path) -> TraceDataset:
    """Every `*.jsonl` file in the directory and below it, in path order, as one trace."""
    files = sorted(directory.rglob("*.jsonl"))
    if not files:
        reason = "a directory without *.jsonl files, in it or below it"
        raise DatasetError([Problem(str(directory), None, reason)])
    found: list[Problem] = []
    records: list[Captured] = []
    for path in files:
        try:
            records += load_file(path, _records)
        except DatasetError as e:
            found += e.problems
    if found:
        raise DatasetError(found)
    if not records:
        raise DatasetError([Problem(str(directory), None, "no capture record in its files")])
    return _dataset(records)


def _records(lines: Iterable[bytes], source: str) -> list[Captured]:
    with gc_paused():
        problems = Problems(source)
        records = []
        for lineno, record in object_lines(jsonl_lines(lines), problems, UNIT):
            captured = _captured(source, lineno, record, problems)
            if captured is not None:
                records.append(captured)
        problems.raise_any()
    return records


def _captured(
    source: str, lineno: int, record: dict[str, Any], problems: Problems
) -> Captured | None:
    """A record's request, time and limit; None after adding what is wrong with it."""
    before = len(problems.items)
    meta = record.get("eventMetadata")
    time_ms = _time_ms(meta, lineno, problems)
    capture = record.get("captureData")
    if not isinstance(capture, dict) or not isinstance(capture.get("endpointInput"), dict):
        problems.add(lineno, "captureData.endpointInput: required, an object with the request")
        return None
    output = capture.get("endpointOutput", {})
    if isinstance(output, dict):
        response = _decoded(output, "captureData.endpointOutput", lineno, problems)
        _check_usage(response, lineno, problems)
    else:
        problems.add(lineno, "captureData.endpointOutput: expected an object")
    body = _request(capture["endpointInput"], lineno, problems)
    limit = None if body is None else _limit(body, lineno, problems)
    if body is None or time_ms is None or len(problems.items) > before:
        return None
    event_id = meta.get("eventId") if isinstance(meta, dict) else None
    return Captured(
        source, lineno, event_id if isinstance(event_id, str) else None, time_ms, body, limit
    )


def _request(entry: dict[str, Any], lineno: int, problems: Problems) -> CapturedRequest | None:
    where = "captureData.endpointInput"
    before = len(problems.items)
    request = _decoded(entry, where, lineno, problems)
    if len(problems.items) > before:
        return None
    if not isinstance(request, dict) or "messages" not in request:
        problems.add(
            lineno,
            f"{where}: the captured request has no 'messages' (encoding "
            f"{entry.get('encoding', 'BASE64')!r}): only OpenAI chat requests can be replayed",
        )
        return None
    try:
        return CapturedRequest.model_validate(request)
    except ValidationError as e:
        for err in e.errors(include_url=False):
            path = ".".join(str(part) for part in err["loc"])
            message = err["msg"].removeprefix("Value error, ")
            problems.add(lineno, f"{where}.data: {path}: {message}")
        return None


def _time_ms(meta: Any, lineno: int, problems: Problems) -> float | None:
    if not isinstance(meta, dict) or "inferenceTime" not in meta:
        problems.add(lineno, "eventMetadata.inferenceTime: required, the request's ISO 8601 time")
        return None
    given = meta["inferenceTime"]
    try:
        when = datetime.fromisoformat(given)
    except (TypeError, ValueError):
        problems.add(lineno, f"eventMetadata.inferenceTime: not an ISO 8601 time: {given!r}")
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp() * 1000.0


def _decoded(entry: dict[str, Any], where: str, lineno: int, problems: Problems) -> Any:
    """A captured payload as JSON (None: no data, or an encoding that is not read)."""
    data = entry.get("data")
    encoding = entry.get("encoding", "BASE64")
    if data is None or encoding not in ("JSON", "BASE64"):
        return None
    try:
        raw = data.encode() if encoding == "JSON" else base64.b64decode(data)
    except (AttributeError, TypeError, ValueError, binascii.Error) as e:
        problems.add(lineno, f"{where}.data: not {encoding} text: {e}")
        return None
    if (unsafe := line_problem(raw)) is not None:
        problems.add(lineno, f"{where}.data: {unsafe}")
        return None
    try:
        return json.loads(raw, parse_constant=_refuse_constant)
    except ValueError as e:
        problems.add(lineno, f"{where}.data: the decoded payload is not JSON: {e}")
        return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _check_usage(response: Any, lineno: int, problems: Problems) -> None:
    """The response's usage.prompt_tokens, which AIPerf reads (and stops on if it is no
    count) though nothing is sent of it."""
    if not isinstance(response, dict):
        return
    usage = response.get("usage", {})
    where = "captureData.endpointOutput.data: usage"
    if not isinstance(usage, dict):
        problems.add(lineno, f"{where}: expected an object")
    elif (count := usage.get("prompt_tokens")) is not None and _count(count) is None:
        problems.add(lineno, f"{where}.prompt_tokens: a count, got {count!r}")


def _limit(body: CapturedRequest, lineno: int, problems: Problems) -> int | None:
    name, given = "max_tokens", body.max_tokens
    if given is None:
        name, given = "max_completion_tokens", body.max_completion_tokens
    if given is None:
        return None
    limit = _count(given)
    if limit is None or not 1 <= limit <= MAX_TOKENS:
        problems.add(
            lineno,
            f"captureData.endpointInput.data: {name}: a reply's limit must be a count between "
            f"1 and {MAX_TOKENS:,}, got {given!r}",
        )
        return None
    return limit


def _count(value: Any) -> int | None:
    """A count as AIPerf reads one (50, 50.0 and "50" alike, not true); None if it is not."""
    if isinstance(value, bool):
        return None
    try:
        return _INT.validate_python(value)
    except ValidationError:
        return None


def _dataset(records: list[Captured]) -> TraceDataset:
    problems: list[Problem] = []
    first = min(record.time_ms for record in records)
    for record in records:
        if record.time_ms - first > MAX_ARRIVAL_S * 1000:
            after = (record.time_ms - first) / 1000
            message = (
                f"eventMetadata.inferenceTime: {after:g} s after the first record; a trace "
                "spans at most a week (604800 s): replay a window of it"
            )
            problems.append(Problem(record.source, record.line, message))
    if problems:
        raise DatasetError(problems)
    ordered = sorted(records, key=lambda record: record.time_ms)  # stable: ties in file order
    ids = [record.event_id for record in ordered]
    named = all(ids) and len(set(ids)) == len(ids)  # by eventId when each has its own
    specs = [
        SessionSpec(
            (record.event_id if named else None) or f"capture-{n:06d}",
            (GraphNode("0", _payload(record)),),
            start_s=(record.time_ms - first) / 1000,
        )
        for n, record in enumerate(ordered)
    ]
    return TraceDataset(specs, None, timed=True)


def _payload(record: Captured) -> Payload:
    extra = None if record.limit is None else {LIMIT_FIELD: record.limit}
    return Payload.of(record.request.messages, tools=record.request.tools, extra=extra)


__all__ = [
    "CapturedRequest",
    "load_sagemaker_dir",
    "read_sagemaker_data_capture",
]
