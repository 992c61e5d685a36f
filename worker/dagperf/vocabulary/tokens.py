"""Token counts without a hub: the server's `usage`, else a local tokenizer, else an estimate.

The server knows best, so its `usage` wins (streaming chat asks for it with
`stream_options.include_usage`). Without it, a `tokenizer.json` given by `--tokenizer PATH` is
loaded with the Hugging Face `tokenizers` library, from that file only: dagperf never downloads
anything. Without either, counts are estimated (one token per streamed output event, else four
characters per token) and labelled so; every record says which source it used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

USAGE = "usage"
TOKENIZER = "tokenizer"
ESTIMATE = "estimate"
CHARS_PER_TOKEN = 4


class TokenizerError(Exception):
    pass


def tokenizer_file(path: str | Path) -> Path:
    """The tokenizer.json a --tokenizer PATH names: the file, or the one inside a directory."""
    candidate = Path(path)
    if candidate.is_dir():
        candidate = candidate / "tokenizer.json"
    if not candidate.is_file():
        raise TokenizerError(
            f"no tokenizer file at {candidate}: give a local tokenizer.json (or its directory); "
            "dagperf never downloads a tokenizer"
        )
    return candidate


def read_tokenizer(path: str | Path) -> str:
    """The tokenizer.json a --tokenizer PATH names, as text, checked to load. The scheduler
    reads it and hands it to every worker, which may run on another host without the file."""
    file = tokenizer_file(path)
    try:
        text = file.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TokenizerError(f"cannot read the tokenizer at {file}: {e}") from None
    TokenCounter(text, origin=str(file))
    return text


class TokenCounter:
    """Counts tokens of text with a tokenizer (a tokenizer.json's text), or estimates them."""

    def __init__(self, tokenizer_json: str | None = None, origin: str = "given"):
        self._tokenizer: Any = None
        if tokenizer_json is not None:
            from tokenizers import Tokenizer  # only runs that ask for one pay for the import

            try:
                self._tokenizer = Tokenizer.from_str(tokenizer_json)
            except Exception as e:  # the library raises bare Exceptions for bad files
                raise TokenizerError(f"cannot load the tokenizer at {origin}: {e}") from None

    @property
    def source(self) -> str:
        return TOKENIZER if self._tokenizer is not None else ESTIMATE

    def count(self, text: str) -> int:
        if self._tokenizer is not None:
            return len(self._tokenizer.encode(text, add_special_tokens=False).ids)
        return -(-len(text) // CHARS_PER_TOKEN)  # ceiling division

    def count_all(self, texts: list[str]) -> list[int]:
        """The counts of many texts at once (a tokenizer encodes them in parallel)."""
        if self._tokenizer is None:
            return [self.count(text) for text in texts]
        encoded = self._tokenizer.encode_batch(texts, add_special_tokens=False)
        return [len(e.ids) for e in encoded]
