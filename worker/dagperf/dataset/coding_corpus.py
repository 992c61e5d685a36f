"""Synthetic prompt text cut from a coding corpus, counted in the tokens of the run.

Formats that record block ids and lengths but no text (agent traces) build prompts from keyed
blocks of this corpus: the same key always gives the same block, so prompts that share leading
keys share that much of their prefix, as the recording did. The corpus is source code (this
package's own modules, read where they are installed), so a real tokenizer splits it as it
splits the code an agent reads. Its units are the run's tokens: a tokenizer's, when the run
counts with one (`--tokenizer`), else words and punctuation marks, which the built-in simulator
counts exactly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from dagperf.dataset.text import text_tokens

_PACKAGE = Path(__file__).resolve().parent.parent


_SIZE = 256 * 1024  # about 30,000 words: block offsets enough, and cut in a few tens of ms


@cache
def corpus_text() -> str:
    """The package's modules in path order, up to `_SIZE` characters."""
    parts, size = [], 0
    for path in sorted(_PACKAGE.rglob("*.py")):
        parts.append(path.read_text("utf-8"))
        size += len(parts[-1])
        if size >= _SIZE:
            break
    # ASCII only: no tokenizer then meets a character it must split into bytes or call
    # unknown (the tests' tiny model has a token per printable character, and no other).
    return "\n".join(parts)[:_SIZE].encode("ascii", "ignore").decode("ascii")


class Blocks:
    """Keyed runs of corpus tokens, and their text."""

    def __init__(self, tokenizer_json: str | None = None, seed: int | None = None):
        self._seed = "" if seed is None else str(seed)
        self._tokenizer: Any = None
        if tokenizer_json is None:
            self.units: Sequence[Any] = _words()
        else:
            from tokenizers import Tokenizer

            self._tokenizer = Tokenizer.from_str(tokenizer_json)
            self.units = _token_ids(tokenizer_json)
        self._size = len(self.units)
        self.block = lru_cache(maxsize=1 << 16)(self._block)

    def _block(self, scope: str, key: int, length: int) -> tuple[Any, ...]:
        """`length` units from where `key` points in the corpus, the same every time."""
        digest = hashlib.sha256(f"{self._seed}:{scope}:{key}".encode()).digest()
        return self._cut(int.from_bytes(digest[:8], "big") % self._size, length)

    def tail(self, name: str, length: int) -> tuple[Any, ...]:
        """`length` units keyed by `name` (a conversation's turn): unique to it."""
        digest = hashlib.sha256(f"{name}:partial_tail".encode()).digest()
        return self._cut(int.from_bytes(digest[:8], "big") % max(self._size - length, 1), length)

    def _cut(self, start: int, length: int) -> tuple[Any, ...]:
        """`length` units from `start`, the corpus read as a ring."""
        out: list[Any] = []
        while length > 0:
            piece = self.units[start : start + length]
            out.extend(piece)
            length -= len(piece)
            start = 0
        return tuple(out)

    def text(self, units: Sequence[Any]) -> str:
        if self._tokenizer is None:
            return " ".join(units)
        return str(self._tokenizer.decode(list(units), skip_special_tokens=False))


@cache
def _words() -> tuple[str, ...]:
    return tuple(text_tokens(corpus_text()))


@lru_cache(maxsize=2)
def _token_ids(tokenizer_json: str) -> tuple[int, ...]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_json)
    return tuple(tokenizer.encode(corpus_text(), add_special_tokens=False).ids)
