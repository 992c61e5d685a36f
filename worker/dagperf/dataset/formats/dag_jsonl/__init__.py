"""The dag_jsonl format: one conversation per line, FORK and SPAWN branches between them.

A file is read in one pass a block at a time (`file_pass`; a large one by two processes,
`halves`), each line checked against the schema (`schema`, `lines`) and kept as where it lies
in the file (`line_store`), its branches as numbered edges (`records`, `edges`), then the
whole-file rules (`rules`). `reader` puts these together into a `DagDataset`, which
`dagperf.graph.dag_compiler` turns into request trees. It needs numpy: a worker process, which
never reads a dataset, never imports this package.
"""

from dagperf.dataset.formats.dag_jsonl.reader import (
    DagDataset,
    load_dag_jsonl,
    parse_dag_jsonl,
    read_dag_jsonl,
)
from dagperf.dataset.formats.dag_jsonl.schema import DagConversation, DagTurn

__all__ = [
    "DagConversation",
    "DagDataset",
    "DagTurn",
    "load_dag_jsonl",
    "parse_dag_jsonl",
    "read_dag_jsonl",
]
