"""Veeksha's `request_log` trace flavour: a log of requests by their lengths only.

    {"input_length": 512, "output_length": 128}
    input_length,output_length,session_id        (CSV, with a header)
    512,128,a

JSON lines or CSV (`dataset.tables`: told apart by the first character; a CSV header may say
`num_prefill_tokens`/`num_decode_tokens`, as Veeksha renames them). Each row is a session of
one request with `input_length` tokens of synthetic text (seeded by its line, as mooncake's
passages) and `output_length` sent as the token limit. Rows sharing a `session_id` are one
session's turns in file order, each continuing the previous one's context and reply, as Veeksha
builds them. Other columns (timestamps, ids a log carries) are ignored, as Veeksha ignores them.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from dagperf.dataset.limits import MAX_PROMPT_TOKENS, MAX_TOKENS
from dagperf.dataset.loader import Problems
from dagperf.dataset.prompts import passage
from dagperf.dataset.specs import GraphNode, Payload, SessionSpec, TraceDataset
from dagperf.dataset.tables import table_rows
from dagperf.runtime.gcpause import gc_paused

REQUIRED = ("input_length", "output_length")
BOUNDS = {"input_length": MAX_PROMPT_TOKENS, "output_length": MAX_TOKENS}


def _length(row: dict[str, Any], name: str) -> int | str:
    """The column as a token count, or what is wrong with it."""
    value = row.get(name)
    if value is None or value == "":
        return f"{name}: required"
    text = (
        str(value).strip() if isinstance(value, int | str) and not isinstance(value, bool) else ""
    )
    if not text.isdigit():
        return f"{name}: expected a whole number of tokens, got {value!r}"
    number = int(text)
    if not 1 <= number <= BOUNDS[name]:
        return f"{name}: must be between 1 and {BOUNDS[name]:,}, got {number:,}"
    return number


def read_request_log(lines: Iterable[bytes], source: str) -> TraceDataset:
    with gc_paused():
        problems = Problems(source)
        sessions: dict[str, list[GraphNode]] = {}
        seen = False
        for lineno, row in table_rows(lines, problems, "one request per line", REQUIRED):
            seen = True
            lengths = [_length(row, name) for name in REQUIRED]
            errors = [e for e in lengths if isinstance(e, str)]
            for message in errors:
                problems.add(lineno, message)
            if errors:
                continue
            prompt, limit = (int(x) for x in lengths)
            sid = row.get("session_id")
            key = f"line-{lineno:06d}" if sid in (None, "") else str(sid)
            turns = sessions.setdefault(key, [])
            k = len(turns)
            text = passage(prompt, random.Random(lineno))
            payload = Payload.of([{"role": "user", "content": text}], max_tokens=limit)
            turns.append(GraphNode(str(k), payload, (k - 1,) if k else (), k - 1 if k else None))
        if not seen and not problems.items:
            problems.add(None, "empty file: a request_log needs at least one request")
        problems.raise_any()
    specs = [SessionSpec(sid, tuple(nodes)) for sid, nodes in sessions.items()]
    return TraceDataset(specs, None, timed=False)
