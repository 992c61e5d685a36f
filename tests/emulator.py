"""A Kubernetes API to test the operator against: kmock's emulator, made a little more real.

kmock stores objects as JSON and serves them over real HTTP. This adds what an API server
stamps on objects (uid, resourceVersion, creationTimestamp, generation on spec changes, a name
from generateName: without one every Event after a namespace's first was refused as a
conflict, and lost); answers
a failed JSON-patch `test` with 422 as the API server does (kopf then retries on its next cycle,
where a 500 would make it repeat the stale patch) and a missing object with reason NotFound
(kubectl 1.20 relies on it); serves core discovery as `v1` (kmock says
`/v1`, which kubectl ignores); and registers the Benchmark resource from the CRD file. There is
no garbage collector and no controller: tests that need owned objects deleted, or pods to exist,
play those parts themselves.

The operator runs as it does in production, kopf's runner included, in its own thread and event
loop, against this server through a kubeconfig file.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
import attrs
import jsonpatch
import kmock
import yaml

from runs import eventually

ROOT = Path(__file__).resolve().parent.parent
CRD_FILE = ROOT / "crds" / "benchmark.yaml"
BENCHMARKS = "/apis/dagperf.io/v1alpha1"


def _merged(old: Any, patch: Any) -> Any:
    if isinstance(old, dict) and isinstance(patch, dict):
        out = dict(old)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = _merged(old.get(key), value)
        return out
    return patch


@attrs.frozen
class StaleResourceVersion(kmock.KubernetesError):
    status: int = 422
    reason: str = "Invalid"
    message: str = "the resourceVersion test failed"


@attrs.frozen
class NotFound(kmock.KubernetesError):
    status: int = 404
    reason: str = "NotFound"  # the API server's reason, which older kubectl versions check


@attrs.define(kw_only=True)
class Cluster(kmock.KubernetesEmulator):
    _versions: Iterator[int] = attrs.field(factory=lambda: itertools.count(1), init=False)

    async def _handle(self, request: kmock.Request) -> Any:
        data = request.data
        if request.resource is not None and isinstance(data, dict):
            meta = data.setdefault("metadata", {})
            if request.action == kmock.action.CREATE:
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault(
                    "creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                )
                meta["generation"] = 1
                meta["resourceVersion"] = str(next(self._versions))
                if "name" not in meta and "generateName" in meta:  # as kopf's Events are
                    meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
                if request.namespace:
                    meta.setdefault("namespace", request.namespace)
            elif request.action == kmock.action.UPDATE and request.name is not None:
                meta["resourceVersion"] = str(next(self._versions))
                key = (request.resource, request.namespace, request.name)
                if "spec" in data and not request.subresource and key in self.objects:
                    old = self.objects[key].raw
                    if _merged(old.get("spec"), data["spec"]) != old.get("spec"):
                        meta["generation"] = old.get("metadata", {}).get("generation", 1) + 1
        try:
            return await super()._handle(request)
        except jsonpatch.JsonPatchTestFailed as e:
            raise StaleResourceVersion(message=str(e)) from None
        except kmock.KubernetesNotFoundError as e:
            raise NotFound(message=e.message) from None

    async def _serve_version(self, request: kmock.Request) -> Any:
        answer = await super()._serve_version(request)
        if answer.get("groupVersion") == "/v1":
            answer["groupVersion"] = "v1"
        return answer

    async def events(self) -> list[dict[str, Any]]:
        return [o.raw for (r, _, _), o in list(self.objects.items()) if r.plural == "events"]

    def history(self, plural: str, namespace: str, name: str) -> list[dict[str, Any] | None]:
        """Every version the object had, oldest first; None where it was deleted."""
        for (r, ns, n), o in list(self.objects.items()):
            if (r.plural, ns, n) == (plural, namespace, name):
                return [None if v is None else dict(v) for v in o.history]
        return []

    def register_crd(self, crd: dict[str, Any]) -> None:
        """Serve a custom resource, as the API server does once its CRD exists."""
        spec = crd["spec"]
        for version in spec["versions"]:
            key = f"{spec['group']}/{version['name']}/{spec['names']['plural']}"
            self.resources[key] = kmock.ResourceInfo(
                kind=spec["names"]["kind"],
                singular=spec["names"]["singular"],
                namespaced=spec["scope"] == "Namespaced",
                verbs={"create", "delete", "get", "list", "patch", "update", "watch"},
                shortnames=set(spec["names"].get("shortNames", [])),
                subresources=set(version.get("subresources", {})),
            )


@contextlib.asynccontextmanager
async def serving_cluster() -> AsyncIterator[tuple[Cluster, str]]:
    """The emulator on a free loopback port, with built-in and Benchmark resources; yields it
    and its URL."""
    async with Cluster() as cluster, kmock.Server(cluster) as server:
        cluster.resources.load_bundled()
        cluster.register_crd(yaml.safe_load(CRD_FILE.read_text()))
        yield cluster, str(server.url).rstrip("/")


def write_kubeconfig(path: Path, url: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": url}}],
        "users": [{"name": "test", "user": {"token": "test"}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "current-context": "test",
    }
    path.write_text(yaml.safe_dump(config))
    return path


class Operated(NamedTuple):
    cluster: Cluster
    api: Api
    restart: Callable[[], Awaitable[None]]  # stop the operator and start a new one


@contextlib.asynccontextmanager
async def operating(
    tmp_path: Path, monkeypatch: Any, namespaces: tuple[str, ...] = (), **settings: str
) -> AsyncIterator[Operated]:
    """The emulator, and the operator watching it (every namespace, or these) with these
    DAGPERF_* settings (and polling fast); the test's own requests go through `api`."""
    async with serving_cluster() as (cluster, url):
        monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kubeconfig", url)))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        for name, value in {"DAGPERF_POLL_INTERVAL_S": "0.2", **settings}.items():
            monkeypatch.setenv(name, value)
        operators: list[OperatorThread] = []

        async def start() -> None:
            operator = OperatorThread(namespaces)
            operator.start()
            assert await asyncio.to_thread(operator.ready_flag.wait, 30), operator.error
            operators.append(operator)

        async def restart() -> None:
            await asyncio.to_thread(operators[-1].stop)
            await start()

        await start()
        try:
            async with aiohttp.ClientSession(headers={"User-Agent": Api.AGENT}) as session:
                yield Operated(cluster, Api(session, url), restart)
        finally:
            await asyncio.to_thread(operators[-1].stop)


class OperatorThread(threading.Thread):
    """`dagperf-operator`'s handlers under kopf's real runner, in a thread of their own."""

    def __init__(self, namespaces: tuple[str, ...] = ()):
        super().__init__(daemon=True)
        self.namespaces = namespaces
        self.stop_flag = threading.Event()
        self.ready_flag = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        import kopf

        from dagperf_operator import handlers

        try:
            asyncio.run(
                kopf.operator(
                    **handlers.run_options(self.namespaces),
                    stop_flag=self.stop_flag,
                    ready_flag=self.ready_flag,
                )
            )
        except BaseException as e:  # surfaced by the test that started it
            self.error = e

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(timeout=30)
        assert not self.is_alive(), "kopf did not stop"


class Api:
    """What a test does through the API: plain HTTP with JSON, like kubectl without a binary."""

    AGENT = "dagperf-tests"  # this User-Agent tells a test's own requests from the operator's

    def __init__(self, session: aiohttp.ClientSession, url: str):
        self.session = session
        self.url = url

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self.session.post(self.url + path, json=body) as response:
            assert response.status < 300, await response.text()
            return await response.json()

    async def get(self, path: str) -> dict[str, Any] | None:
        async with self.session.get(self.url + path) as response:
            if response.status == 404:
                return None
            assert response.status < 300, await response.text()
            return await response.json()

    async def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/merge-patch+json"}
        async with self.session.patch(self.url + path, data=json.dumps(body), headers=headers) as r:
            assert r.status < 300, await r.text()
            return await r.json()

    async def delete(self, path: str) -> None:
        async with self.session.delete(self.url + path) as response:
            assert response.status < 300, await response.text()

    async def benchmark(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.get(f"{BENCHMARKS}/namespaces/{namespace}/benchmarks/{name}")

    async def until(self, namespace: str, name: str, predicate: Any, timeout: float = 30) -> dict:
        """The Benchmark, once `predicate(benchmark)` holds."""
        return await eventually(
            lambda: self.benchmark(namespace, name),
            lambda b: b is not None and predicate(b),
            timeout,
        )

    async def gone(self, namespace: str, name: str, timeout: float = 30) -> None:
        await eventually(lambda: self.benchmark(namespace, name), lambda b: b is None, timeout)
