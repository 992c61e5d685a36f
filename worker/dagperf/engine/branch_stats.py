"""BranchStats: how the DAG's branches fared, in the counters AIPerf users already read.

At the end of a run every spawned child ended one way: spawned = completed + errored +
truncated; and every suspended parent too: suspended = resumed + suppressed + failed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(slots=True)
class BranchStats:
    children_spawned: int = 0  # FORK and SPAWN children whose first request was sent
    children_completed: int = 0  # children whose last turn succeeded
    children_errored: int = 0  # children ended by an error (or the loss of their worker)
    children_truncated: int = 0  # children cut short by a stop condition or cancellation
    parents_suspended: int = 0  # parents that reached a join before their children drained
    parents_resumed: int = 0  # suspended parents whose join turn was then sent
    parents_failed_due_to_child_error: int = 0  # parents aborted by --fail-fast
    joins_suppressed: int = 0  # suspended parents whose join a stop condition kept from firing

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
