"""What the whole session shares: the real control plane, up once, and the session as the
subreaper of everything it starts."""

from __future__ import annotations

import ctypes
import logging

import pytest

from dagperf.runtime.logs import CurrentStderr

from control_plane import ControlPlane


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory):
    """etcd, kube-apiserver and kube-controller-manager on loopback (tests/cluster/up.sh), with
    the Benchmark CRD not yet installed; stopped by down.sh at the end of the session."""
    plane = ControlPlane.up(tmp_path_factory.mktemp("control-plane"))
    try:
        yield plane
    finally:
        plane.down()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The cluster tests last: the control plane then runs only while they do, not beside the
    rest of the suite (some of which measures timing)."""
    items.sort(key=lambda item: item.get_closest_marker("cluster") is not None)


def pytest_configure(config: pytest.Config) -> None:
    """Orphans of the processes the tests start become this process's children rather than
    PID 1's, so a test that checks nothing was left behind looks only at its own session."""
    pr_set_child_subreaper = 36
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0)


@pytest.fixture(autouse=True)
def _logging_as_it_was():
    """A test that runs a command in this process (`main(["profile", ...])`) sets up the
    command's logging: the root logger at INFO, writing to stderr. Undone after it, or every
    later test's in-process operator (kopf, in a thread) would print its INFO lines between
    pytest's own."""
    root = logging.getLogger()
    level = root.level
    yield
    for handler in [h for h in root.handlers if isinstance(h, CurrentStderr)]:
        root.removeHandler(handler)
    root.setLevel(level)
