"""ShareGPT conversations from a local file, read as AIPerf 0.13 reads the ShareGPT file it
downloads for `--public-dataset sharegpt` (dagperf downloads nothing: give it the file).

    [{"id": "a1", "conversations": [{"from": "human", "value": "What is a KV cache?"},
                                    {"from": "gpt", "value": "It keeps the keys and ..."}]}]

The file is a JSON array of records, the published file's shape and the only one AIPerf reads,
or JSON lines, one record per line; a problem names the line its record starts on. As AIPerf
reads a record: only `human` and `gpt` messages count (a system prompt or another role is
dropped), and each `human` message directly followed by a `gpt` one is a turn, its prompt the
human text and its reply limit (`max_completion_tokens`) the gpt text's length in tokens; a
record whose messages name neither role pairs its first two values. Records AIPerf drops are
dropped, as silently: fewer than two messages, no such pair, or any turn out of AIPerf's bounds
(a prompt of 4 to 1024 tokens, a reply of 4 or more, together 2048 at most). Malformed records
(not an object, no `conversations` list, a message that is not an object, a used `value` that is
not a string) are refused, where AIPerf would stop on them or skip them unnoticed.

Lengths: AIPerf counts tokens with the model's tokenizer, downloaded. dagperf counts with
`--tokenizer PATH` (a local tokenizer.json) when given, which gives AIPerf's counts for the same
tokenizer; without one it estimates a text's tokens as its words and punctuation marks
(dagperf.dataset.text, the count the Veeksha ShareGPT flavour uses), which sets the limits and
the bounds a little differently from a real tokenizer's.

A turn continues the previous turn's context and its live reply (`deltas_without_responses`,
AIPerf's default for ShareGPT). A record may set `context_mode`, which AIPerf does not read:
`deltas_with_responses` puts the recorded gpt reply where the live one would go, and
`message_array_with_responses` sends each turn as the recorded conversation up to it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from typing import Any

from dagperf.dataset.formats.columns import LIMIT_FIELD, Keys, turn_pairs
from dagperf.dataset.loader import Problems, jsonl_lines, object_lines
from dagperf.dataset.specs import (
    REFUSED_CONTEXT_MODE,
    ContextMode,
    GraphNode,
    Payload,
    SessionSpec,
    TraceDataset,
)
from dagperf.dataset.text import text_tokens
from dagperf.runtime.gcpause import gc_paused

CountTokens = Callable[[list[str]], list[int]]  # texts to their lengths in tokens
ROLES = Keys()  # from/value, human/gpt: ShareGPT's keys, which are Veeksha's defaults too
MIN_TOKENS, MAX_PROMPT_TOKENS, MAX_TOTAL_TOKENS = 4, 1024, 2048  # AIPerf's bounds for a turn
_SPACE = re.compile(r"[ \t\n\r]*")
Pairs = list[tuple[str, str]]


def estimated_tokens(texts: list[str]) -> list[int]:
    return [len(text_tokens(text)) for text in texts]


def read_sharegpt(
    lines: Iterable[bytes], source: str, count_tokens: CountTokens | None = None
) -> TraceDataset:
    with gc_paused():
        problems = Problems(source)
        records: list[tuple[int, Any, Pairs, ContextMode | None]] = []
        for lineno, record in _records(iter(lines), problems):
            if (found := _read_record(record, lineno, problems)) is not None:
                records.append((lineno, _session_id(record), *found))
        if not records and not problems.items:
            problems.add(None, "empty file: it needs at least one conversation record")
        problems.raise_any()
        texts = [text for _, _, pairs, _ in records for pair in pairs for text in pair]
        lengths = iter((count_tokens or estimated_tokens)(texts))
        specs, taken = [], set()
        for lineno, given, pairs, mode in records:
            turns = [(prompt, reply, next(lengths), next(lengths)) for prompt, reply in pairs]
            if not pairs or not all(_in_bounds(p, r) for _, _, p, r in turns):
                continue
            key = given if given and given not in taken else f"line-{lineno:06d}"
            taken.add(key)
            specs.append(_spec(key, [(p, r, n) for p, r, _, n in turns], mode))
        if not specs:
            problems.add(
                None,
                f"no conversation to send: none of its {len(records)} records "
                "has a human message answered by gpt with every turn in AIPerf's "
                "bounds (a prompt of 4 to 1024 tokens, a reply of 4 or more, 2048 "
                "together)",
            )
            problems.raise_any()
    return TraceDataset(specs, ContextMode.DELTAS_WITHOUT_RESPONSES, timed=False)


def _in_bounds(prompt: int, reply: int) -> bool:
    """AIPerf's test of a turn's lengths (vLLM's benchmark's, which it adopted)."""
    return (
        MIN_TOKENS <= prompt <= MAX_PROMPT_TOKENS
        and reply >= MIN_TOKENS
        and prompt + reply <= MAX_TOTAL_TOKENS
    )


def _session_id(record: dict[str, Any]) -> str | None:
    given = record.get("id")
    return given if isinstance(given, str) and given else None


def _records(lines: Iterator[bytes], problems: Problems) -> Iterator[tuple[int, Any]]:
    """Each record with the line it starts on, from a JSON array or from JSON lines."""
    head: list[bytes] = []
    for line in lines:
        head.append(line)
        if stripped := line.strip().removeprefix(b"\xef\xbb\xbf").strip():
            break
    else:
        return
    if not stripped.startswith(b"["):
        numbered = jsonl_lines(chain(head, lines))
        yield from object_lines(numbered, problems, "one conversation record per line")
        return
    data = b"".join(chain(head, lines))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        at = data.count(b"\n", 0, e.start) + 1
        problems.add(at, f"invalid JSON: not UTF-8 text (byte 0x{data[e.start]:02x})")
        return
    yield from _array_items(text, problems)


def _array_items(text: str, problems: Problems) -> Iterator[tuple[int, Any]]:
    """The items of the JSON array `text` holds, each with the line it starts on; reading stops
    at the first invalid JSON, past which items cannot be told apart."""
    decoder = json.JSONDecoder()
    counted, line = 0, 1

    def line_at(pos: int) -> int:
        nonlocal counted, line
        line += text.count("\n", counted, pos)
        counted = pos
        return line

    pos = _after_space(text, text.index("[") + 1)
    if text.startswith("]", pos):
        return
    while True:
        try:
            item, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            problems.add(e.lineno, f"invalid JSON: {e.msg}")
            return
        except RecursionError:
            problems.add(line_at(pos), "nested too deeply to read")
            return
        yield line_at(pos), item
        pos = _after_space(text, end)
        if text.startswith(",", pos):
            pos = _after_space(text, pos + 1)
        elif text.startswith("]", pos):
            if text[pos + 1 :].strip():
                problems.add(line_at(pos), "invalid JSON: text after the array's end")
            return
        else:
            problems.add(line_at(pos), "invalid JSON: expected ',' or ']' after a record")
            return


def _after_space(text: str, pos: int) -> int:
    found = _SPACE.match(text, pos)
    return found.end() if found else pos


def _read_record(
    record: Any, lineno: int, problems: Problems
) -> tuple[Pairs, ContextMode | None] | None:
    """A record's turns, as AIPerf pairs them, and its context mode; None after adding what is
    wrong with it."""
    if not isinstance(record, dict):
        problems.add(lineno, "expected a JSON object (one conversation record)")
        return None
    messages = record.get(ROLES.column)
    if not isinstance(messages, list):
        problems.add(
            lineno,
            f"{ROLES.column}: required, a list of messages with "
            f"'{ROLES.role}' and '{ROLES.content}'",
        )
        return None
    bad = [j for j, m in enumerate(messages) if not isinstance(m, dict)]
    for j in bad:
        problems.add(
            lineno,
            f"{ROLES.column}[{j}]: expected an object with '{ROLES.role}' and '{ROLES.content}'",
        )
    mode = _context_mode(record, lineno, problems)
    if bad or len(messages) < 2:
        return None if bad else ([], mode)
    used = [m for m in messages if m.get(ROLES.role) in (ROLES.user, ROLES.assistant)]
    if not used:  # no roles named: the first two values are the one turn
        used = messages[:2]
        if not _strings(messages, used, lineno, problems):
            return None
        prompt, reply = (str(m.get(ROLES.content) or "") for m in used)
        return ([(prompt, reply)] if prompt and reply else []), mode
    if not _strings(messages, used, lineno, problems):
        return None
    return [(u, a) for u, a in turn_pairs(used, ROLES) if u and a], mode


def _strings(
    messages: list[Any], used: list[dict[str, Any]], lineno: int, problems: Problems
) -> bool:
    """Whether every used message's value is a string or absent, adding the ones that are not."""
    fine = True
    for m in used:
        value = m.get(ROLES.content)
        if value is not None and not isinstance(value, str):
            j = next(k for k, other in enumerate(messages) if other is m)
            problems.add(
                lineno, f"{ROLES.column}[{j}].{ROLES.content}: a string, got {type(value).__name__}"
            )
            fine = False
    return fine


def _context_mode(record: dict[str, Any], lineno: int, problems: Problems) -> ContextMode | None:
    given = record.get("context_mode")
    if given is None:
        return None
    if given == ContextMode.MESSAGE_ARRAY_WITHOUT_RESPONSES:
        problems.add(lineno, f"context_mode: {REFUSED_CONTEXT_MODE}")
        return None
    taken = [m for m in ContextMode if m is not ContextMode.MESSAGE_ARRAY_WITHOUT_RESPONSES]
    if given not in taken:
        names = ", ".join(taken)
        problems.add(lineno, f"context_mode: one of {names}, got {given!r}")
        return None
    return ContextMode(given)


def _spec(key: str, turns: list[tuple[str, str, int]], mode: ContextMode | None) -> SessionSpec:
    """A conversation's turns as a chain of requests; what each one's messages hold depends on
    whether the live reply (the default), the recorded reply, or the whole recorded
    conversation so far comes before its prompt."""
    nodes: list[GraphNode] = []
    recorded: list[dict[str, Any]] = []
    for k, (prompt, reply, limit) in enumerate(turns):
        user = {"role": "user", "content": prompt}
        if mode is ContextMode.MESSAGE_ARRAY_WITH_RESPONSES:
            messages = [*recorded, user]
        elif mode is ContextMode.DELTAS_WITH_RESPONSES and k:
            messages = [recorded[-1], user]
        else:
            messages = [user]
        payload = Payload.of(messages, extra={LIMIT_FIELD: limit})
        nodes.append(GraphNode(str(k), payload, (k - 1,) if k else (), k - 1 if k else None))
        recorded += [user, {"role": "assistant", "content": reply}]
    return SessionSpec(key, tuple(nodes), mode)
