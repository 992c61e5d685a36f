"""The one fixture shared across modules: the real control plane, up once for the session."""

from __future__ import annotations

import pytest

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
