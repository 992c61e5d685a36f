"""The request graph (`model`) and the compilers that build it from each dataset format."""

from typing import TYPE_CHECKING

from dagperf.graph.model import (
    SENDS_NOTHING,
    Gate,
    Node,
    Payload,
    RequestGraph,
    Session,
    SessionKind,
    Shape,
    Tree,
    Waits,
)

if TYPE_CHECKING:
    from dagperf.graph.dag_compiler import MAX_TREE_REQUESTS, compile_dag_jsonl
_COMPILER = {"MAX_TREE_REQUESTS", "compile_dag_jsonl"}


def __getattr__(name: str) -> object:
    """The dag_jsonl compiler, imported when first named: it needs numpy, which a worker
    process never does."""
    if name in _COMPILER:
        from dagperf.graph import dag_compiler

        return getattr(dag_compiler, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MAX_TREE_REQUESTS",
    "SENDS_NOTHING",
    "Gate",
    "Node",
    "Payload",
    "RequestGraph",
    "Session",
    "SessionKind",
    "Shape",
    "Tree",
    "Waits",
    "compile_dag_jsonl",
]
