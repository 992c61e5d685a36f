"""A Benchmark's cluster as the cluster tests set it up: the chart installed by helm on the real
node (tests/cluster/node.sh) in a namespace of its own, its operator running as the chart's pod,
and a namespace for Benchmarks with a dataset, the endpoint's API key and a results claim. The
endpoint is the simulator in the test's loop, on the node's address, behind a Gate (the `cluster`
fixture in conftest.py). Most tests share one operator (SharedOperator)."""

from __future__ import annotations

import asyncio
import base64
import itertools
from pathlib import Path

from dagperf.simulator import SimConfig

from control_plane import ROOT, Client, ControlPlane, established, namespace
from real_node import claim_directory, install_operator
from runs import eventually

DATASET = ROOT / "examples" / "dag_jsonl" / "three-roots.dag.jsonl"  # 3 roots, 9 requests
KEY = "sk-cluster-secret"
SIM = SimConfig(api_key=KEY, ttft_ms=5, itl_ms=1, output_tokens=8)
_tests = itertools.count(1)


class Cluster:
    """One test's chart release and Benchmark namespace, and the simulator its Benchmarks use."""

    def __init__(self, plane: ControlPlane, api: Client, ns: str, system: str, sim, gate):
        self.plane, self.api, self.ns, self.system = plane, api, ns, system
        self.sim, self.gate = sim, gate

    def path(self, name: str = "") -> str:
        base = f"/apis/dagperf.io/v1alpha1/namespaces/{self.ns}/benchmarks"
        return f"{base}/{name}" if name else base

    def benchmark(self, name: str = "demo", **spec) -> dict:
        body = {
            "endpoint": {"url": self.sim.url, "apiKeySecretRef": {"name": "endpoint"}},
            "dataset": {"configMapRef": {"name": "dataset"}},
            "workers": {"replicas": 2},
            "results": {"persistentVolumeClaim": {"claimName": "results"}},
        }
        return {
            "apiVersion": "dagperf.io/v1alpha1", "kind": "Benchmark",
            "metadata": {"name": name, "namespace": self.ns}, "spec": body | spec,
        }  # fmt: skip

    async def start(self, name: str = "demo", **spec) -> dict:
        return await self.api.create(self.path(), self.benchmark(name, **spec))

    async def until(self, name: str, predicate, timeout: float = 180) -> dict:
        return await eventually(
            lambda: self.api.get(self.path(name)), lambda b: b is not None and predicate(b), timeout
        )

    async def pods(self, prefix: str) -> list[dict]:
        found = await self.api.items(f"/api/v1/namespaces/{self.ns}/pods")
        return [p for p in found if p["metadata"]["name"].startswith(prefix)]

    async def operator_pods(self) -> list[dict]:
        return await self.api.items(f"/api/v1/namespaces/{self.system}/pods")

    async def claim(self, name: str) -> Path:
        return await claim_directory(self.api, self.ns, name)

    async def logs(self) -> str:
        """Every container's log in the test's namespaces, to show with a failure."""
        shown = []
        for ns in (self.system, self.ns):
            for pod in await self.api.items(f"/api/v1/namespaces/{ns}/pods"):
                name = pod["metadata"]["name"]
                got = self.plane.kubectl("logs", "-n", ns, name, "--all-containers", "--tail=40")
                shown.append(f"--- {ns}/{name}\n{got.stdout}{got.stderr}")
        return "\n".join(shown)

    async def owned(self, name: str) -> dict[str, list[str]]:
        """Every object in the namespace that names the Benchmark as its owner, by kind."""
        kinds = {
            "Job": "/apis/batch/v1/jobs", "Deployment": "/apis/apps/v1/deployments",
            "Service": "/api/v1/services", "Secret": "/api/v1/secrets",
            "PersistentVolumeClaim": "/api/v1/persistentvolumeclaims",
            "NetworkPolicy": "/apis/networking.k8s.io/v1/networkpolicies",
        }  # fmt: skip
        found: dict[str, list[str]] = {}
        for kind, path in kinds.items():
            prefix, plural = path.rsplit("/", 1)
            for obj in await self.api.items(f"{prefix}/namespaces/{self.ns}/{plural}"):
                owners = obj["metadata"].get("ownerReferences") or []
                if any(o["kind"] == "Benchmark" and o["name"] == name for o in owners):
                    found.setdefault(kind, []).append(obj["metadata"]["name"])
        return found


class SharedOperator:
    """The chart installed once a session, its operator watching every namespace: most tests'
    operator, each test in a namespace of its own. Installing it and starting its pod took 5 s
    of each test's 12. Stopped (scaled to no pod) while a test that installs an operator of its
    own, or wants none acting, runs: a Benchmark must never have two."""

    release, system = "shared", "dagperf-shared"

    def __init__(self, plane: ControlPlane):
        self.plane, self.installed, self.running = plane, False, False

    async def start(self, api: Client) -> None:
        if not self.installed:
            await namespace(api, self.system)
            await asyncio.to_thread(
                install_operator, self.plane, self.release, self.system, None,
                "operator.logFormat=plain",
            )  # fmt: skip
            await established(api)
            self.installed = True
        elif not self.running:
            self._scale(1)
        self.running = True

    async def stop(self, api: Client) -> None:
        if self.running:
            self._scale(0)
            pods = f"/api/v1/namespaces/{self.system}/pods"
            await eventually(lambda: api.items(pods), lambda left: left == [], timeout=120)
            self.running = False

    def _scale(self, replicas: int) -> None:
        scaled = self.plane.kubectl(
            "scale", "deployment", "--namespace", self.system, f"--replicas={replicas}",
            f"--selector=app.kubernetes.io/instance={self.release}",
        )  # fmt: skip
        assert scaled.returncode == 0, scaled.stderr


def names() -> tuple[str, str, str]:
    """A fresh (operator namespace, Benchmark namespace, release) for a test."""
    n = next(_tests)
    return f"dagperf-system-{n}", f"bench-{n}", f"op{n}"


async def prepare(api: Client, ns: str) -> None:
    """The Benchmarks' namespace with the dataset, the API key and a claim."""
    await namespace(api, ns)
    await api.create(f"/api/v1/namespaces/{ns}/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dataset"},
        "data": {DATASET.name: DATASET.read_text()},
    })  # fmt: skip
    await api.create(f"/api/v1/namespaces/{ns}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "endpoint"},
        "data": {"api-key": base64.b64encode(KEY.encode()).decode()},
    })  # fmt: skip
    await api.create(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "results"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    })  # fmt: skip


def failed_job(job: dict) -> bool:
    """The Job controller's verdict: failed, with no retry (the operator sets backoffLimit 0)."""
    conditions = job["status"].get("conditions") or []
    return any(c["type"] == "Failed" and c["status"] == "True" for c in conditions)


def phase(name: str):
    return lambda b: (b.get("status") or {}).get("phase") == name


def condition(benchmark: dict, kind: str) -> dict:
    return next(c for c in benchmark["status"]["conditions"] if c["type"] == kind)
