"""Dataset formats and their loaders; each yields validated data for `dagperf.graph`."""

from typing import TYPE_CHECKING

from dagperf.dataset.dag_jsonl import DagConversation, DagTurn
from dagperf.dataset.dag_records import Branch, BranchMode, conversation_branches
from dagperf.dataset.loader import MAX_PROBLEMS, DatasetError, Problem

if TYPE_CHECKING:
    from dagperf.dataset.dag_reader import (
        DagDataset,
        load_dag_jsonl,
        parse_dag_jsonl,
        read_dag_jsonl,
    )
_READER = {"DagDataset", "load_dag_jsonl", "parse_dag_jsonl", "read_dag_jsonl"}


def __getattr__(name: str) -> object:
    """The dag_jsonl reader, imported when first named: it needs numpy, which a worker
    process, importing this package for its request types, never does."""
    if name in _READER:
        from dagperf.dataset import dag_reader

        return getattr(dag_reader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MAX_PROBLEMS",
    "Branch",
    "BranchMode",
    "DagConversation",
    "DagDataset",
    "DagTurn",
    "DatasetError",
    "Problem",
    "conversation_branches",
    "load_dag_jsonl",
    "parse_dag_jsonl",
    "read_dag_jsonl",
]
