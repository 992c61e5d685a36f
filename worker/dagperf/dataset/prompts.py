"""Prompt text of a target length, from a bundled corpus, for datasets that give only lengths.

Lengths are in the simulator's tokens (words and punctuation marks, `dagperf.dataset.text`):
a passage of N tokens is N corpus tokens joined by spaces, so the built-in simulator counts
exactly N. A real model's tokenizer counts differently (often 1.2 to 1.4 tokens per English
word); the server's `usage` reports what it really saw.

Passages are cut from the corpus read as a ring, at an offset drawn from the caller's generator,
so the same seed gives the same text. A keyed block (a trace's hash id) always gives the same
passage for the same key, so two prompts sharing leading hash ids share a prefix a cache can
reuse, and prompts with different keys differ from their first token.
"""

from __future__ import annotations

import random
import zlib
from functools import cache
from importlib import resources

from dagperf.dataset.text import text_tokens


@cache
def corpus_tokens() -> tuple[str, ...]:
    text = resources.files("dagperf.synthetic").joinpath("corpus.txt").read_text("utf-8")
    return tuple(text_tokens(text))


def passage(tokens: int, rng: random.Random) -> str:
    """`tokens` corpus tokens from a random place in the corpus."""
    corpus = corpus_tokens()
    return _cut(corpus, rng.randrange(len(corpus)), tokens)


def keyed_passage(key: int, tokens: int) -> str:
    """The passage for a key: the same key always gives the same text."""
    corpus = corpus_tokens()
    offset = random.Random(key).randrange(len(corpus))
    # A different key at a nearby offset would share its opening words; a key's own marker
    # keeps two different blocks from ever sharing a prefix.
    return _cut(corpus, offset, tokens - 1, first=f"b{key}") if tokens > 0 else ""


def fresh_passage(tokens: int, rng: random.Random) -> str:
    """A keyed passage under a key drawn from `rng`: unlike `passage`, it shares no opening
    token with another fresh passage or with a keyed one of another key, so where two prompts
    stop sharing a prefix is exactly where their fresh passages begin."""
    return keyed_passage(rng.getrandbits(63), tokens)


def blocks_prompt(hash_ids: list[int], tokens: int, block_size: int) -> str:
    """A prompt of `tokens` tokens built from one keyed block per hash id, `block_size` tokens
    each; the last block takes what remains, and a prompt longer than its blocks is padded
    with further keyed text so every token is accounted for."""
    parts, left = [], tokens
    for key in hash_ids:
        if left <= 0:
            break
        size = min(block_size, left)
        parts.append(keyed_passage(key, size))
        left -= size
    if left > 0:  # more tokens than blocks describe: unique text, keyed by the blocks seen
        tail_key = zlib.crc32(repr(("tail", *hash_ids)).encode())  # str hash() is per process
        parts.append(keyed_passage(tail_key, left))
    return " ".join(p for p in parts if p)


def _cut(corpus: tuple[str, ...], offset: int, tokens: int, first: str | None = None) -> str:
    out = [first] if first is not None else []
    size = len(corpus)
    while tokens > 0:
        take = min(tokens, size - offset)
        out.extend(corpus[offset : offset + take])
        tokens -= take
        offset = 0
    return " ".join(out)
