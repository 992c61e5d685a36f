"""The real node the cluster tests' pods run on (tests/cluster/node.sh, beside the control plane
when the session runs as root): what the machine looked like before it, where a pod's container
runs on the host, where a claim's volume lies, and the chart installed to run on it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from control_plane import CHART, Client, ControlPlane

NODE = "dagperf-node"
NODE_IP = "10.244.0.1"  # the gateway of the pods' bridge: the one host address pods reach
BRIDGE = "dagperf0"
IMAGE = "localhost/dagperf:0.1.0"
HOST_DIRS = ("/run/containerd", "/var/lib/cni", "/var/lib/kubelet")  # node.sh's, outside its own
LOCK = "/tmp/dagperf-real-node.lock"


def _lines(*command: str) -> list[str]:
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()


@dataclass(frozen=True)
class Machine:
    """What the node may change outside its directory, as it is now."""

    iptables: list[str]
    netns: list[str]
    links: list[str]
    host_dirs: list[str]

    @classmethod
    def now(cls) -> Machine:
        return cls(
            iptables=[line for line in _lines("iptables-save") if not line.startswith("#")],
            netns=[line.split()[0] for line in _lines("ip", "netns", "list")],
            links=sorted(line.split()[0] for line in _lines("ip", "-br", "link")),
            host_dirs=[d for d in HOST_DIRS if Path(d).exists()],
        )


@contextlib.contextmanager
def machine() -> Iterator[Machine]:
    """The machine to put a node on, as it was before: one real node runs on a machine at a time
    (its bridge and addresses are fixed), so this waits for the machine's lock, which another
    session may hold, and keeps it until the node is down."""
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield Machine.now()


def container_pid(plane: ControlPlane, pod: dict) -> int:
    """The host PID of a pod's (first) container's main process, from containerd's state."""
    container = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    tasks = plane.directory / "node/containerd/state/io.containerd.runtime.v2.task/k8s.io"
    return int((tasks / container / "init.pid").read_text())


def kill(plane: ControlPlane, pod: dict) -> None:
    """SIGKILL to a pod's container, as a crash or the OOM killer would end it."""
    os.kill(container_pid(plane, pod), signal.SIGKILL)


async def claim_directory(api: Client, ns: str, claim: str) -> Path:
    """Where the local volume bound to a claim lies on the host."""
    found = await api.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim}")
    assert found and found["spec"].get("volumeName"), (claim, found)
    volume = await api.get(f"/api/v1/persistentvolumes/{found['spec']['volumeName']}")
    assert volume is not None
    return Path(volume["spec"]["local"]["path"])


def restricted(container: dict) -> dict:
    """A container as the restricted Pod Security Standard admits it, from the project's image."""
    security = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    return {"image": IMAGE, "imagePullPolicy": "Never", "securityContext": security} | container


def pod(name: str, *containers: dict, **spec) -> dict:
    security = {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"securityContext": security, "containers": list(containers)} | spec,
    }


def phase_is(*phases: str):
    def check(found: dict | None) -> bool:
        return bool(found) and found["status"].get("phase") in phases

    return check


# The chart asks a whole CPU per worker and half one for the scheduler: with the operator and
# the test's endpoint, more than this 2-core node has to give.
SMALL = [
    "benchmarkDefaults.worker.resources.requests.cpu=250m",
    "benchmarkDefaults.scheduler.resources.requests.cpu=250m",
]


def install_operator(
    plane: ControlPlane, release: str, system: str, watched: str | None, *settings: str
) -> None:
    """The chart, by helm, in namespace `system`: its operator watching namespace `watched`
    (or every one), polling each second, its Benchmarks' pods sized for this node."""
    chosen = [
        *([f"watchNamespaces={{{watched}}}"] if watched else []),
        "operator.pollIntervalSeconds=1",
        "benchmarkDefaults.metricsLingerSeconds=0",
        *SMALL,
        *settings,
    ]
    sets = [word for setting in chosen for word in ("--set", setting)]
    plane.helm("install", release, str(CHART), "--namespace", system, *sets)
