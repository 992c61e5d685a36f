"""Children that die with the process that started them, however it ends.

`dagperf profile` starts the simulator and the workers. If it is killed with SIGKILL (or the OOM
killer), nothing of it runs to stop them: they would go on under PID 1, holding ports and
sending load. So each child asks the kernel for a signal when its parent dies
(PR_SET_PDEATHSIG), and then checks that its parent is still the one that started it, which
closes the window where the parent died before the request was made.

Children also run in a process group of their own, so a signal to the parent's group (Ctrl-C
in a terminal, `timeout`, a container runtime) reaches only the parent, which then stops them in
order and writes what the run measured.
"""

from __future__ import annotations

import ctypes
import os
import signal

PARENT_ENV = "DAGPERF_PARENT_PID"  # set for a child: the pid that must outlive it
_PR_SET_PDEATHSIG = 1


def child_env(env: dict[str, str]) -> dict[str, str]:
    """The environment for a child bound to this process."""
    return env | {PARENT_ENV: str(os.getpid())}


def hold() -> None:
    """In a child: die when the parent named by the environment dies (now or already)."""
    parent = os.environ.pop(PARENT_ENV, None)
    if parent is None:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != int(parent):  # it died before the line above: nothing will signal us
        os._exit(1)
