"""AIPerf's `raw_payload` dataset type: each line a complete chat request body, sent verbatim.

    {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 20}

A file: each line is a conversation of one request. A directory: each `*.jsonl` file in it (in
name order) is one conversation, named by the file's stem, whose lines are its turns, sent in
order, each as written (`message_array_with_responses`). Nothing is added to a body: no model,
no `stream`, no `--extra-inputs`; so a body's `stream` should agree with `--streaming`, which
says how replies are read. Every line needs a `messages` array whose items have a `role`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dagperf.dataset.content import with_roles
from dagperf.dataset.loader import DatasetError, Problem, Problems, read_files, validated_lines
from dagperf.dataset.specs import ContextMode, GraphNode, Payload, SessionSpec, TraceDataset
from dagperf.runtime.gcpause import gc_paused


class RawBody(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    messages: list[dict[str, Any]] = Field(min_length=1)

    @field_validator("messages")
    @classmethod
    def _each_message_has_a_role(cls, messages: list[dict[str, Any]]) -> Any:
        return with_roles(messages)

    def payload(self) -> Payload:
        rest = dict(self.model_extra or {})
        return Payload.of(self.messages, model=rest.get("model"), extra=rest, verbatim=True)


def _bodies(lines: Iterable[bytes], problems: Problems) -> list[RawBody]:
    rows = validated_lines(lines, RawBody, problems, "one request body per line")
    return [row for _, _, row in rows if row is not None]


def _conversation(key: str, bodies: list[RawBody]) -> SessionSpec:
    nodes = tuple(
        GraphNode(str(k), body.payload(), parents=(k - 1,) if k else ())
        for k, body in enumerate(bodies)
    )
    return SessionSpec(key, nodes)


def read_raw_payload(lines: Iterable[bytes], source: str) -> TraceDataset:
    """A file: one single-request conversation per line."""
    with gc_paused():
        problems = Problems(source)
        bodies = _bodies(lines, problems)
        if not bodies and not problems.items:
            problems.add(None, "empty file: a raw_payload file needs at least one request body")
        problems.raise_any()
    specs = [_conversation(f"line-{k + 1:06d}", [body]) for k, body in enumerate(bodies)]
    return TraceDataset(specs, ContextMode.MESSAGE_ARRAY_WITH_RESPONSES, timed=False)


def load_raw_payload_dir(directory: Path) -> TraceDataset:
    """A directory: one conversation per `*.jsonl` file, its lines the turns in order."""
    files = sorted(directory.glob("*.jsonl"))
    if not files:
        raise DatasetError([Problem(str(directory), None, "a directory without *.jsonl files")])
    read = read_files(files, _bodies)
    specs = [_conversation(path.stem, bodies) for path, bodies in read if bodies]
    return TraceDataset(specs, ContextMode.MESSAGE_ARRAY_WITH_RESPONSES, timed=False)
