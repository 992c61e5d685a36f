"""What the whole session shares: the real control plane, up once, and the session as the
subreaper of everything it starts."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
from pathlib import Path

import pytest

from dagperf.runtime.logs import CurrentStderr

import image_runtime
import operated_cluster
import real_node
from control_plane import ControlPlane, established, namespace
from engine_stack import Engines
from runs import gated_simulator

IMAGE = image_runtime.image_name()


@pytest.fixture(scope="session")
def machine(request: pytest.FixtureRequest):
    """The machine as it was before the session's real node (real_node.Machine), which runs
    when the session is root's, with the project's image in it; None when it is not. Held for
    the session: one real node runs on a machine at a time."""
    if os.geteuid() != 0:
        yield None
        return
    request.getfixturevalue("image")  # the node imports it
    with real_node.machine() as before:
        yield before


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory, machine):
    """etcd, kube-apiserver and kube-controller-manager (tests/cluster/up.sh), with the
    Benchmark CRD not yet installed, and, for root, a real node beside them (tests/cluster/
    node.sh: kube-scheduler, a kubelet on containerd, kube-proxy, CoreDNS, local volumes);
    stopped by down.sh at the end of the session."""
    node = "real" if machine is not None else ""
    plane = ControlPlane.up(tmp_path_factory.mktemp("control-plane"), node=node)
    try:
        yield plane
    finally:
        plane.down()


@pytest.fixture
def node(control_plane: ControlPlane, machine) -> ControlPlane:
    """The control plane with its real node, for a test whose pods must run."""
    if machine is None:
        pytest.skip("the cluster's node runs as root only (its network, mounts and cgroups)")
    return control_plane


@pytest.fixture(scope="session")
def shared_operator(control_plane: ControlPlane) -> operated_cluster.SharedOperator:
    """The operator most cluster tests share, installed on first use (SharedOperator)."""
    return operated_cluster.SharedOperator(control_plane)


@pytest.fixture
async def operator_stopped(control_plane: ControlPlane, shared_operator) -> None:
    """For a test that installs an operator of its own, or makes Benchmarks no operator may
    act on: the shared one is stopped first."""
    async with control_plane.admin() as api:
        await shared_operator.stop(api)


@pytest.fixture
async def cluster(node: ControlPlane, shared_operator, request: pytest.FixtureRequest):
    """A namespace for Benchmarks (operated_cluster.Cluster), the operator of the session
    watching it with every other; or (param "listed") the chart installed for the test alone
    in a namespace of its own, its operator watching only the Benchmarks' one."""
    listed = getattr(request, "param", "every") == "listed"
    system, ns, release = operated_cluster.names()
    async with node.admin() as api:
        await operated_cluster.prepare(api, ns)
        if listed:
            await shared_operator.stop(api)
            await namespace(api, system)
            await asyncio.to_thread(
                real_node.install_operator, node, release, system, ns, "operator.logFormat=plain"
            )
            await established(api)
        else:
            await shared_operator.start(api)
            system = shared_operator.system
        async with gated_simulator(operated_cluster.SIM, real_node.NODE_IP) as (sim, gate):
            cluster = operated_cluster.Cluster(node, api, ns, system, sim, gate)
            try:
                yield cluster
            finally:
                print(await cluster.logs())  # shown when the test failed
                if listed:
                    await asyncio.to_thread(node.helm, "uninstall", release, "--namespace", system)


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


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's image, built by tests/image/build.sh (or found unchanged in podman's layer
    cache) once a session; the directory of its SBOM and build record. tests/run.sh builds it
    first and names that directory in $DAGPERF_IMAGE_BUILT: the image it recorded is taken as
    it is when it is still the one under the image's name."""
    built = os.environ.get("DAGPERF_IMAGE_BUILT")
    if built and (Path(built) / "build.txt").exists():
        record = (Path(built) / "build.txt").read_text()
        current = image_runtime.podman("image", "inspect", "--format={{.Id}}", IMAGE).stdout
        if f"id: sha256:{current.strip()}\n" in record:
            return Path(built)
    output = tmp_path_factory.mktemp("image")
    build = image_runtime.build(output)
    assert build.returncode == 0, build.stdout + build.stderr
    name, size = build.stdout.splitlines()[-2:]
    assert name == f"image: localhost/{IMAGE}"
    assert size.startswith("size: ") and size.endswith(" bytes)")
    return output


# Each group's tests share one xdist worker, so its session fixture starts once: one control
# plane, one set of engines, one image check (tests/run.sh runs `-n 3 --dist loadgroup`).
GROUPS = ("cluster", "engine", "image")


def _group(item: pytest.Item) -> str | None:
    return next((g for g in GROUPS if item.get_closest_marker(g) is not None), None)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups off the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The grouped tests first, the longest group first, so that under xdist the other worker
    runs the single tests beside them instead of waiting for them at the end; within its group,
    a test that ends what the group shares (marked `last`) after the rest."""
    for item in items:
        if (group := _group(item)) is not None:
            item.add_marker(pytest.mark.xdist_group(group))

    def key(item: pytest.Item) -> tuple[int, bool]:
        group = _group(item)
        rank = GROUPS.index(group) if group else len(GROUPS)
        return rank, item.get_closest_marker("last") is not None

    items.sort(key=key)


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
