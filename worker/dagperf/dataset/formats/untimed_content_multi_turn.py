"""Veeksha's `untimed_content_multi_turn` trace flavour: recorded conversations replayed turn by
turn (ShareGPT, LMSYS-Chat and the like).

    {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello!"},
                       {"from": "human", "value": "Tell me more"}, {"from": "gpt", "value": "..."}]}

One row per conversation (rows sharing a `session_id` are one conversation, in file order). The
column, role and content keys are Veeksha's defaults, `conversations`, `from`, `value`, with
`human` for the user and `gpt` for the assistant, unless a Veeksha trace config names others
(`Keys`); the column may also hold the list as a JSON string (a CSV export). Each user message
answered by the assistant is one request: the earlier messages with their recorded replies,
then the user's message, sent as written (`message_array_with_responses`), with the recorded
reply's length in words as its token limit (Veeksha counts with the model's tokenizer). As
Veeksha does, leading messages that are not the user's (a system prompt, an assistant greeting),
other roles between turns and a last user message without a reply are skipped; a conversation
left with no answered user message is refused (Veeksha would send an empty request).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from dagperf.dataset.formats.columns import DEFAULT_KEYS, Keys, turn_pairs
from dagperf.dataset.loader import Problems, jsonl_lines, object_lines
from dagperf.dataset.specs import ContextMode, GraphNode, Payload, SessionSpec, TraceDataset
from dagperf.dataset.text import text_tokens
from dagperf.runtime.gcpause import gc_paused


def _messages(row: dict[str, Any], keys: Keys) -> list[Any] | str:
    """The row's messages, or what is wrong with them."""
    value = row.get(keys.column)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as e:
            return f"{keys.column}: a string that is not a JSON list: {e}"
    if not isinstance(value, list):
        return (
            f"{keys.column}: required, a list of messages with '{keys.role}' and '{keys.content}'"
        )
    return value


def read_conversations(
    lines: Iterable[bytes], source: str, keys: Keys = DEFAULT_KEYS
) -> TraceDataset:
    with gc_paused():
        problems = Problems(source)
        sessions: dict[str, list[tuple[str, str]]] = {}
        rows = object_lines(jsonl_lines(lines), problems, "one conversation per line")
        for lineno, row in rows:
            messages = _messages(row, keys)
            if isinstance(messages, str):
                problems.add(lineno, messages)
                continue
            pairs = list(turn_pairs(messages, keys))
            if not pairs:
                problems.add(
                    lineno,
                    f"{keys.column}: no '{keys.user}' message answered by '{keys.assistant}'",
                )
                continue
            sid = row.get("session_id")
            sessions.setdefault(f"line-{lineno:06d}" if sid is None else str(sid), []).extend(pairs)
        if not sessions and not problems.items:  # every line makes one or the other
            problems.add(None, "empty file: it needs at least one conversation")
        problems.raise_any()
    specs = [SessionSpec(sid, _nodes(pairs)) for sid, pairs in sessions.items()]
    return TraceDataset(specs, ContextMode.MESSAGE_ARRAY_WITH_RESPONSES, timed=False)


def _nodes(pairs: list[tuple[str, str]]) -> tuple[GraphNode, ...]:
    nodes: list[GraphNode] = []
    history: list[dict[str, str]] = []
    for k, (user, assistant) in enumerate(pairs):
        messages = [*history, {"role": "user", "content": user}]
        limit = max(1, len(text_tokens(assistant)))
        nodes.append(
            GraphNode(str(k), Payload.of(messages, max_tokens=limit), (k - 1,) if k else ())
        )
        history += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return tuple(nodes)
