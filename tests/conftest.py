"""What the whole session shares: the real control plane, up once, and the session as the
subreaper of everything it starts."""

from __future__ import annotations

import ctypes

import pytest

from control_plane import ControlPlane
from engine_stack import Engines


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory):
    """etcd, kube-apiserver and kube-controller-manager on loopback (tests/cluster/up.sh), with
    the Benchmark CRD not yet installed; stopped by down.sh at the end of the session."""
    plane = ControlPlane.up(tmp_path_factory.mktemp("control-plane"))
    try:
        yield plane
    finally:
        plane.down()


@pytest.fixture(scope="session")
def engines(tmp_path_factory: pytest.TempPathFactory):
    """Three llama-servers on loopback, one request slot each, serving a tiny random-weight
    llama written for this session, each behind a relay that logs what it received
    (tests/engines/up.sh); stopped by down.sh at the end of the session."""
    stack = Engines.up(tmp_path_factory.mktemp("engines"), 3)
    try:
        yield stack
    finally:
        stack.down()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The engine tests, then the cluster tests, last: the engines and the control plane then
    run only while their tests do, not beside the rest of the suite (some of which measures
    timing)."""
    items.sort(
        key=lambda item: (
            item.get_closest_marker("cluster") is not None,
            item.get_closest_marker("engine") is not None,
        )
    )


def pytest_configure(config: pytest.Config) -> None:
    """Orphans of the processes the tests start become this process's children rather than
    PID 1's, so a test that checks nothing was left behind looks only at its own session."""
    pr_set_child_subreaper = 36
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0)
