"""Tokens in and words out: the cheap tokenizer and vocabulary that the simulator and the
prompts made for token-only traces share (a layer below both).

The simulator needs a tokenizer only to size prompts and find shared prefixes, so it uses a cheap
deterministic one (words and punctuation) and renders chat messages the way a chat template
would: role markers, then content, in order, so two prompts that share leading messages share
leading tokens. Replies are drawn from a fixed vocabulary with a generator seeded by the prompt,
so the same request gives the same reply for the same seed, in any process.
"""

from __future__ import annotations

import json
import random
import re
import zlib
from typing import Any

_TOKEN = re.compile(r"\w+|[^\w\s]")

VOCABULARY = tuple(
    """the of and to in is it that for on with as was at by this be from or an are which
    not have has but they one all were can more their there been when who will would so
    what up out if about into than them some could other time only new these two may then
    first any like now my such over also our after way most made well just very where much
    model token cache prefix branch fork spawn graph node turn reply answer plan detail
    summary section point review draft result value test case data system agent task""".split()
)


def text_tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def chat_prompt_tokens(messages: list[dict[str, Any]], tools: Any = None) -> list[str]:
    tokens: list[str] = []
    for message in messages:
        tokens.append(f"<|{message.get('role', '')}|>")
        tokens.extend(_TOKEN.findall(_content_text(message.get("content"))))
        if tool_calls := message.get("tool_calls"):
            tokens.extend(_TOKEN.findall(json.dumps(tool_calls, sort_keys=True)))
    if tools:
        tokens.extend(_TOKEN.findall(json.dumps(tools, sort_keys=True)))
    tokens.append("<|assistant|>")
    return tokens


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: text counts, other parts as their JSON
        return " ".join(
            part["text"]
            if isinstance(part, dict) and isinstance(part.get("text"), str)
            else json.dumps(part, sort_keys=True)
            for part in content
        )
    return "" if content is None else json.dumps(content, sort_keys=True)


def reply_words(seed: int, prompt: list[str], count: int) -> list[str]:
    """`count` words, the same for the same seed and prompt."""
    digest = zlib.crc32("\x1f".join(prompt).encode("utf-8", "surrogatepass"))
    rng = random.Random((seed << 32) | digest)
    return rng.choices(VOCABULARY, k=count)
