"""AIPerf's `inputs_json`: the `inputs.json` a run wrote (AIPerf's, or dagperf's own:
`dagperf.exports.inputs`), replayed: each payload is sent as written.

    {"data": [{"session_id": "c1",
               "payloads": [{"messages": [{"role": "user", "content": "Hi"}], "model": "m",
                             "stream": false, "max_completion_tokens": 20}, {...}]}]}

One JSON document (indented, as both tools write it), not JSON lines: a problem names the line
its session starts on. Each session is a conversation whose payloads are its turns, sent in
order, each when the one before it is answered, each exactly as written
(`message_array_with_responses`: nothing is added, no history, no model, no `stream`, no
`--extra-inputs`), to the path of `--endpoint-type`; so give the endpoint type the bodies were
made for, and a `--streaming` that agrees with their `stream`. A payload of chat messages keeps
them as the turn's messages (and its prompt for token estimates); any other body (a completions
`prompt`) is sent whole.

As AIPerf reads the file: `data` is a list of sessions, each with a `session_id` (a string) and
at least one payload (an object), the ids all different. Other keys are refused (AIPerf ignores
them; neither tool writes any), as is a session id that is empty; payload `messages` need a
`role` each, as raw_payload's do, since no chat server takes them without.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, field_validator

from dagperf.dataset.content import with_roles
from dagperf.dataset.json_places import after_space, items, members
from dagperf.dataset.limits import line_problem
from dagperf.dataset.loader import Problems, load_file
from dagperf.dataset.specs import ContextMode, GraphNode, Payload, SessionSpec, TraceDataset
from dagperf.runtime.gcpause import gc_paused


class InputsSession(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    session_id: StrictStr = Field(min_length=1, description="The conversation's id.")
    payloads: list[dict[str, Any]] = Field(
        min_length=1, description="Its turns' request bodies, in order, sent as written."
    )

    @field_validator("payloads")
    @classmethod
    def _messages_have_roles(cls, payloads: list[dict[str, Any]]) -> Any:
        for k, body in enumerate(payloads):
            messages = body.get("messages")
            if messages is None:
                continue
            if not isinstance(messages, list) or not messages:
                raise ValueError(f"payload {k}: messages must be a non-empty list")
            if not all(isinstance(m, dict) for m in messages):
                raise ValueError(f"payload {k}: each message must be an object")
            try:
                with_roles(messages)
            except ValueError as e:
                raise ValueError(f"payload {k}: {e}") from None
        return payloads


def load_inputs_json(path: str | Path) -> TraceDataset:
    return load_file(path, read_inputs_json)


def read_inputs_json(lines: Iterable[bytes], source: str) -> TraceDataset:
    """Validate an inputs.json given as byte lines; `source` names it in messages."""
    with gc_paused():
        problems = Problems(source)
        sessions: dict[str, tuple[int, InputsSession]] = {}
        for lineno, entry in _entries(b"".join(lines), problems):
            session = _session(lineno, entry, problems)
            if session is None:
                continue
            if session.session_id in sessions:
                first = sessions[session.session_id][0]
                problems.add(
                    lineno,
                    f"session_id: '{session.session_id}' is also the session on line {first}: "
                    "each session_id once",
                )
                continue
            sessions[session.session_id] = (lineno, session)
        if not sessions and not problems.items:
            problems.add(None, "no sessions: 'data' needs at least one session")
        problems.raise_any()
    specs = [_spec(session) for _, session in sessions.values()]
    return TraceDataset(specs, ContextMode.MESSAGE_ARRAY_WITH_RESPONSES, timed=False)


def _session(lineno: int, entry: Any, problems: Problems) -> InputsSession | None:
    if not isinstance(entry, dict):
        problems.add(lineno, "expected a session object with session_id and payloads")
        return None
    try:
        return InputsSession.model_validate(entry)
    except ValidationError as e:
        for err in e.errors(include_url=False):
            path = ".".join(str(part) for part in err["loc"])
            message = err["msg"].removeprefix("Value error, ")
            problems.add(lineno, f"{path}: {message}" if path else message)
        return None


def _entries(data: bytes, problems: Problems) -> Iterator[tuple[int, Any]]:
    """Each item of the document's `data` list with the line it starts on; what is wrong with
    the document around them is added to `problems`."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        at = data.count(b"\n", 0, e.start) + 1
        problems.add(at, f"invalid JSON: not UTF-8 text (byte 0x{data[e.start]:02x})")
        return
    if not text.strip():
        problems.add(None, "empty file: an inputs.json is an object with a 'data' list")
        return
    try:
        document = json.loads(text, parse_constant=_refuse_constant)
    except ValueError as e:  # JSONDecodeError has its line
        problems.add(getattr(e, "lineno", None), f"invalid JSON: {getattr(e, 'msg', e)}")
        return
    except RecursionError:
        problems.add(None, "nested too deeply to read")
        return
    if not isinstance(document, dict):
        problems.add(1, "expected a JSON object with a 'data' list of sessions")
        return
    spans = dict(members(text, after_space(text, 0)))
    for key in document:
        if key != "data":
            line = text.count("\n", 0, spans[key][0]) + 1
            problems.add(line, f"{key}: not a key of inputs.json (only data)")
    if not isinstance(document.get("data"), list):
        problems.add(text.count("\n", 0, spans["data"][0]) + 1 if "data" in spans else 1, _NO_DATA)
        return
    line, counted = 1, 0  # counted up to each item in turn, as they come in order
    for (at, end), entry in zip(items(text, spans["data"][1]), document["data"], strict=True):
        line, counted = line + text.count("\n", counted, at), at
        if (unsafe := line_problem(text[at:end].encode())) is not None:
            problems.add(line, unsafe)
            continue
        yield line, entry


_NO_DATA = "data: required, a list of sessions ({'session_id': ..., 'payloads': [...]})"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _spec(session: InputsSession) -> SessionSpec:
    nodes = tuple(
        GraphNode(str(k), _payload(body), parents=(k - 1,) if k else ())
        for k, body in enumerate(session.payloads)
    )
    return SessionSpec(session.session_id, nodes)


def _payload(body: dict[str, Any]) -> Payload:
    model = body.get("model")
    model = model if isinstance(model, str) else None
    if "messages" in body:
        rest = {key: value for key, value in body.items() if key != "messages"}
        return Payload.of(body["messages"], model=model, extra=rest, verbatim=True)
    prompt = body.get("prompt")  # a completions body: the prompt stands in for messages
    shown = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else []
    return Payload.of(shown, model=model, extra=dict(body), verbatim=True)


__all__ = ["InputsSession", "load_inputs_json", "read_inputs_json"]
