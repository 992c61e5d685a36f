"""A tiny llama-architecture GGUF with random weights, for llama-server to serve in the tests.

Written at test time with PyPI `gguf` (never committed): 4 layers, width 256, 4 heads, FFN 512,
F32, about 2.8 M parameters and 11 MB, the same bytes for the same seed.

The vocabulary is SentencePiece-style (llama.cpp's "llama" tokenizer): `<unk>`, `<s>`, `</s>`,
the 256 byte tokens, and one token per printable ASCII character plus newline (`▁` for the
space), with no multi-character token. Every text made of those characters therefore tokenizes
one token per character whatever surrounds it, so a reply's text, sent back as history,
re-tokenizes to exactly the tokens that were generated: a FORK child's prompt starts with its
parent's cached tokens, and token counts are exact.

That holds only if the model never generates a byte or control token (a lone byte of a UTF-8
sequence comes back as U+FFFD, three bytes). The weights see to it: every token embedding
carries the same constant in dimension 0, and no layer writes to that dimension (row 0 of each
output projection is zero), so after the final norm that dimension is always positive and
large; the output head weighs it at -100 for the tokens a reply must not contain, and at 0 for
the characters. Their logits sit a thousand below the characters' under any sampler settings.

    python tests/engines/tiny_llama.py OUT.gguf [--seed N]
"""

from __future__ import annotations

import argparse
import string
from pathlib import Path

import gguf
import numpy as np

WIDTH = 256
LAYERS = 4
HEADS = 4
FFN = 512
CONTEXT = 8192
SPACE = "\u2581"  # SentencePiece's word boundary: llama.cpp writes spaces as this
CHARACTERS = [SPACE if c == " " else c for c in string.printable if c not in "\t\r\x0b\x0c"]
EMBEDDING_ANCHOR = 16.0  # dimension 0 of every token embedding; C^2 / WIDTH = 1
SUPPRESSION = -100.0


def vocabulary() -> tuple[list[str], list[int]]:
    """The tokens and their types: controls, the bytes, then one per character."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    tokens += CHARACTERS
    types += [gguf.TokenType.NORMAL] * len(CHARACTERS)
    return tokens, [int(t) for t in types]


def weights(vocab: int, seed: int) -> dict[str, np.ndarray]:
    """Random weights (numpy's row-major [out, in]), with dimension 0 kept as the anchor."""
    rng = np.random.default_rng(seed)

    def normal(*shape: int, scale: float) -> np.ndarray:
        return rng.normal(0.0, scale, size=shape).astype(np.float32)

    embedding = normal(vocab, WIDTH, scale=1.0)
    embedding[:, 0] = EMBEDDING_ANCHOR
    head = normal(vocab, WIDTH, scale=0.02)
    head[:, 0] = SUPPRESSION
    head[vocab - len(CHARACTERS) :, 0] = 0.0  # the characters: the only tokens a reply holds
    tensors = {
        "token_embd.weight": embedding,
        "output_norm.weight": np.ones(WIDTH, dtype=np.float32),
        "output.weight": head,
    }
    for layer in range(LAYERS):
        block = f"blk.{layer}"
        attention_out = normal(WIDTH, WIDTH, scale=0.02)
        down = normal(WIDTH, FFN, scale=0.02)
        attention_out[0, :] = 0.0  # nothing writes to the anchor
        down[0, :] = 0.0
        tensors |= {
            f"{block}.attn_norm.weight": np.ones(WIDTH, dtype=np.float32),
            f"{block}.attn_q.weight": normal(WIDTH, WIDTH, scale=0.02),
            f"{block}.attn_k.weight": normal(WIDTH, WIDTH, scale=0.02),
            f"{block}.attn_v.weight": normal(WIDTH, WIDTH, scale=0.02),
            f"{block}.attn_output.weight": attention_out,
            f"{block}.ffn_norm.weight": np.ones(WIDTH, dtype=np.float32),
            f"{block}.ffn_gate.weight": normal(FFN, WIDTH, scale=0.02),
            f"{block}.ffn_up.weight": normal(FFN, WIDTH, scale=0.02),
            f"{block}.ffn_down.weight": down,
        }
    return tensors


def write(path: Path, seed: int = 0) -> Path:
    """Write the model to `path` (through a temporary name, so a reader never sees half)."""
    tokens, types = vocabulary()
    part = path.with_name(path.name + ".part")
    writer = gguf.GGUFWriter(part, "llama")
    writer.add_name("dagperf-tiny-llama")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(WIDTH)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(WIDTH // HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(False)  # a reply's first character is its own token
    for name, tensor in weights(len(tokens), seed).items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    part.replace(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(write(args.path, args.seed))


if __name__ == "__main__":
    main()
