"""AIPerf's custom dataset type `single_turn`, with AIPerf 0.13's file shape and what it sends
for it on a chat endpoint (tests compare against requests AIPerf sent). Its rows (`rows.Turn`) are
the turns of `multi_turn` too, and both formats' conversations are put together in `rows`.

    {"text": "What is deep learning?"}
    {"texts": ["Who are you?", "Hello"], "output_length": 32, "extra": {"top_p": 1}}
    {"session_id": "s1", "text": "first"}  {"session_id": "s1", "text": "second"}

A turn's content is its `text`, or its `texts` (strings, or AIPerf's named fields
`{"name", "contents"}`): one text is sent as a string, several as text parts (empty ones left
out, as AIPerf renders them). `role` is the message's role (default user), `output_length` the
reply's limit (sent as `max_completion_tokens`, as AIPerf does on chat), `extra` fields merged
into the request body, `delay` ms waited after the previous turn's reply, `timestamp` ms the
conversation's arrival on a fixed schedule (the first turn's; a file is timed when every
conversation has one).

single_turn rows are conversations of one request, except rows sharing a `session_id`: those are
sent in file order, each as written (`message_array_with_responses`).

Images, audio and video are refused with a clear message: dagperf sends text. Unknown fields are
refused too (AIPerf ignores them), so a typo such as `output_lenght` fails the load instead of
silently changing the run.
"""

from __future__ import annotations

from collections.abc import Iterable

from dagperf.dataset.formats.rows import Rows, Turn, conversations_of
from dagperf.dataset.loader import Problems, validated_lines
from dagperf.dataset.specs import TraceDataset
from dagperf.runtime.gcpause import gc_paused


def read_single_turn(lines: Iterable[bytes], source: str) -> TraceDataset:
    with gc_paused():
        return conversations_of(_single_turn_rows(lines, source), source, single=True)


def _single_turn_rows(lines: Iterable[bytes], source: str) -> Rows:
    problems = Problems(source)
    for lineno, _, row in validated_lines(lines, Turn, problems, "one request per line"):
        yield problems, lineno, None if row is None else row.session_id, [row] if row else [], None
