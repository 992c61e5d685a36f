"""A tokenizer.json with one token per printable ASCII character, as the tests' tiny llama
counts (tests/engines/tiny_llama.py), so `--tokenizer` builds an agent trace's prompts in the
engine's own tokens.

    python3 examples/routing/char_tokenizer.py OUT.json
"""

from __future__ import annotations

import string
import sys
from pathlib import Path


def write(path: Path) -> Path:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    chars = [c for c in string.printable if c not in "\t\r\x0b\x0c"]
    model = models.WordLevel({c: i for i, c in enumerate(["[UNK]", *chars])}, unk_token="[UNK]")
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    tokenizer.save(str(path))
    return path


if __name__ == "__main__":
    write(Path(sys.argv[1]))
