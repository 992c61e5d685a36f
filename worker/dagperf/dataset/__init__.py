"""Dataset formats and their loaders; each yields validated data for `dagperf.graph`."""

from dagperf.dataset.dag_jsonl import DagConversation, DagTurn
from dagperf.dataset.dag_reader import DagDataset, load_dag_jsonl, parse_dag_jsonl, read_dag_jsonl
from dagperf.dataset.dag_records import Branch, BranchMode, conversation_branches
from dagperf.dataset.loader import MAX_PROBLEMS, DatasetError, Problem

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
