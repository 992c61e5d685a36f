"""AIPerf's `random_pool` dataset type: requests drawn at random, with replacement, from pools.

    {"text": "What is deep learning?"}
    {"texts": ["Compare the two answers.", "A: yes. B: no."]}
    {"type": "random_pool", "texts": [{"name": "query", "contents": ["Summarise it."]}]}

A row is a single_turn row's text and nothing else: `text` or `texts` (strings or AIPerf's
`{name, contents}`), optionally `"type": "random_pool"`. AIPerf's pool rows carry no session,
schedule, role, limit or extra fields (it ignores them there), so dagperf refuses them rather
than run a file that means something else; use single_turn for those.

A file is one pool. A directory is one pool per file, in name order (AIPerf reads every file in
it; dagperf skips dot files): a request is one draw from each pool, their texts in that order
as the parts of one user message, as AIPerf merges them.

Each draw is a conversation of one request, so there is no history and no `context_mode` to
set; the global default applies, as AIPerf declares none for this type. How many are drawn
follows AIPerf's sizing of the dataset, mapped onto dagperf's flags: `--num-conversations`, else
`--request-count`, else 100 (AIPerf's `--num-dataset-entries`, which takes precedence there, has
no dagperf flag). Draws are seeded with `--random-seed` (fresh ones without, as AIPerf uses
system entropy): the same seed draws the same requests in dagperf, though not the ones AIPerf
draws, whose generator is seeded its own way. Every request is one AIPerf could send for the
same file.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import model_validator

from dagperf.dataset.formats.rows import TextRow, text_content
from dagperf.dataset.loader import DatasetError, Problem, Problems, read_files, validated_lines
from dagperf.dataset.specs import GraphNode, Payload, SessionSpec, TraceDataset
from dagperf.runtime.gcpause import gc_paused

DEFAULT_DRAWS = 100  # AIPerf's pool dataset size when no count is given
SINGLE_TURN_ONLY = ("session_id", "role", "timestamp", "delay", "output_length", "extra")


class PoolRow(TextRow):
    """One row of a pool."""

    type: Literal["random_pool"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _text_alone(cls, data: Any) -> Any:
        if isinstance(data, dict) and (found := [k for k in SINGLE_TURN_ONLY if k in data]):
            raise ValueError(
                f"{found[0]}: a random_pool row holds text only (AIPerf ignores "
                f"{', '.join(found)} there); use single_turn for per-request fields"
            )
        return data


def _pool(lines: Iterable[bytes], problems: Problems) -> list[PoolRow]:
    rows = validated_lines(lines, PoolRow, problems, "one pool row per line")
    pool = [row for _, _, row in rows if row is not None]
    if not pool and not problems.items:
        problems.add(None, "empty file: a pool needs at least one row")
    return pool


def read_random_pool(
    lines: Iterable[bytes], source: str, draws: int | None = None, seed: int | None = None
) -> TraceDataset:
    """A file: one pool, `draws` requests drawn from it (default 100), seeded by `seed`."""
    with gc_paused():
        problems = Problems(source)
        pool = _pool(lines, problems)
        problems.raise_any()
    return _drawn([pool], draws, seed)


def load_random_pool_dir(
    directory: Path, draws: int | None = None, seed: int | None = None
) -> TraceDataset:
    """A directory: one pool per file, each request one draw from every pool."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        raise DatasetError([Problem(str(directory), None, "a directory without files")])
    pools = [pool for _, pool in read_files(files, _pool)]
    return _drawn(pools, draws, seed)


def _drawn(pools: list[list[PoolRow]], draws: int | None, seed: int | None) -> TraceDataset:
    """`draws` conversations of one request, each one row of every pool, drawn pool by pool
    (as AIPerf draws); requests that drew the same rows share one payload."""
    rng = random.Random(seed)
    count = draws or DEFAULT_DRAWS
    picks = [rng.choices(range(len(pool)), k=count) for pool in pools]
    payloads: dict[tuple[int, ...], Payload] = {}
    specs = []
    for i, chosen in enumerate(zip(*picks, strict=True)):
        payload = payloads.get(chosen)
        if payload is None:
            contents = [c for pool, k in zip(pools, chosen, strict=True) for c in pool[k].contents]
            message = {"role": "user", "content": text_content(contents)}
            payload = payloads[chosen] = Payload.of([message])
        specs.append(SessionSpec(f"draw-{i + 1:06d}", (GraphNode("0", payload),)))
    return TraceDataset(specs, None, timed=False)
