"""The scheduler's functional core: which request goes where and when, fed events, no I/O."""

from dagperf.engine.branch_stats import BranchStats
from dagperf.engine.dispatcher import Dispatcher
from dagperf.engine.flights import Flight, armed_under
from dagperf.engine.phase import Phase, Progress
from dagperf.engine.runs import NodeState, SessionState, TreeRun
from dagperf.engine.window import Until

__all__ = [
    "BranchStats",
    "Dispatcher",
    "Flight",
    "NodeState",
    "Phase",
    "Progress",
    "SessionState",
    "TreeRun",
    "Until",
    "armed_under",
]
