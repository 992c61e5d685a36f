"""The request graph (`model`) and the compilers that build it from each dataset format."""

from dagperf.graph.dag_compiler import MAX_TREE_REQUESTS, compile_dag_jsonl
from dagperf.graph.model import Node, Payload, RequestGraph, Session, SessionKind, Shape, Tree

__all__ = [
    "MAX_TREE_REQUESTS",
    "Node",
    "Payload",
    "RequestGraph",
    "Session",
    "SessionKind",
    "Shape",
    "Tree",
    "compile_dag_jsonl",
]
