"""Whether this process may fork a helper to read half of a large dataset beside it.

A fork copies only the calling thread, and a lock another thread held stays held in the child:
so only on Linux, from the main thread of a process running no threads but a read's progress
line (the operator, for one, reads its files from worker threads and keeps to one process).
"""

from __future__ import annotations

import multiprocessing
import sys
import threading


def may_fork() -> bool:
    return (
        sys.platform == "linux"
        and not multiprocessing.current_process().daemon
        and threading.current_thread() is threading.main_thread()
        and threading.active_count() <= 2
    )
