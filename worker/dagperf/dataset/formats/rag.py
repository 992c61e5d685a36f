"""Veeksha's `rag` trace flavour: retrieval prompts over documents, the most asked-about ones
warmed before anything is measured.

    {"doc_id": "doc-17", "prompt_text": "Context: ...\\n\\nQuestion: Summarize it.",
     "input_length": 2048, "output_length": 128}

JSON lines or CSV with those columns (`dataset.tables`; a quoted prompt may span lines).

Each row is a request of its own: `prompt_text` sent as written, `output_length` its token limit
(`input_length`, Veeksha's count of the prompt's tokens, is not read; a `session_id` is ignored,
as Veeksha gives every row a session of its own). As Veeksha runs it:

- the `num_documents` documents with the most rows (10 unless a Veeksha config says otherwise;
  ties go to the first to appear) are the run's documents, and rows of other documents are left
  out;
- before anything is measured, the first row of each of them is sent, one at a time, the most
  frequent first (the warm-up: `TraceDataset.warmup`, sent and waited for, never exported), so
  their text is in the server's prefix cache when the measured requests come;
- then every kept row, in an order shuffled with a seed (42, Veeksha's default, or a Veeksha
  config's `seed`): Veeksha shuffles too, so one document's questions do not come in a burst.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictStr, ValidationError

from dagperf.dataset.limits import OutputTokens, PromptTokens
from dagperf.dataset.loader import Problems, describe
from dagperf.dataset.specs import GraphNode, Payload, SessionSpec, TraceDataset
from dagperf.dataset.tables import table_rows
from dagperf.runtime.gcpause import gc_paused

NUM_DOCUMENTS = 10  # Veeksha's default
SEED = 42  # Veeksha's default seed


def _doc_id(value: Any) -> Any:
    if isinstance(value, str | int) and not isinstance(value, bool):
        return value  # 17 and "17" stay two documents, as Veeksha's pandas keeps them
    raise ValueError(f"must be a string or an integer, got {type(value).__name__}")


DocId = Annotated[str | int, BeforeValidator(_doc_id)]


class RagRow(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)  # Veeksha reads only its columns

    doc_id: DocId = Field(description="The document the prompt retrieved.")
    prompt_text: StrictStr = Field(min_length=1, description="The whole prompt, sent as is.")
    output_length: OutputTokens = Field(description="Maximum completion tokens (max_tokens).")
    input_length: PromptTokens | None = Field(
        default=None, description="The prompt's length in the model's tokens; not read."
    )


def read_rag(
    lines: Iterable[bytes], source: str, num_documents: int = NUM_DOCUMENTS, seed: int = SEED
) -> TraceDataset:
    """Validate a rag trace given as byte lines; `source` names it in messages."""
    with gc_paused():
        problems = Problems(source)
        rows: list[tuple[int, RagRow]] = []
        for lineno, data in table_rows(lines, problems, "one request per line"):
            try:
                rows.append((lineno, RagRow.model_validate(data)))
            except ValidationError as e:
                for message in describe(e, b""):
                    problems.add(lineno, message)
        if not rows and not problems.items:
            problems.add(None, "empty file: a rag trace needs at least one request")
        problems.raise_any()
    counts = Counter(row.doc_id for _, row in rows)
    top = sorted(counts, key=counts.__getitem__, reverse=True)[: max(num_documents, 1)]
    chosen = set(top)
    kept = [(lineno, row) for lineno, row in rows if row.doc_id in chosen]
    first_of: dict[str | int, tuple[int, RagRow]] = {}
    for lineno, row in kept:
        first_of.setdefault(row.doc_id, (lineno, row))
    warmup = tuple(_session("warmup-line", *first_of[doc]) for doc in top)
    random.Random(seed).shuffle(kept)
    specs = [_session("line", lineno, row) for lineno, row in kept]
    return TraceDataset(specs, None, timed=False, warmup=warmup)


def _session(prefix: str, lineno: int, row: RagRow) -> SessionSpec:
    payload = Payload.of(
        [{"role": "user", "content": row.prompt_text}], max_tokens=row.output_length
    )
    return SessionSpec(f"{prefix}-{lineno:06d}", (GraphNode("0", payload),))


__all__ = ["NUM_DOCUMENTS", "SEED", "RagRow", "read_rag"]
