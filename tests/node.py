"""A node of the real control plane: the suite's stand-in for the kubelet (and the scheduler).

There is no container runtime here, so `Node` does what a kubelet would with a local process:
it registers a Node, binds every unscheduled pod to itself (through the binding subresource, as
kube-scheduler does), and for each pod bound to it runs its init containers' commands to their
end and then starts the container's, with the pod's environment and volumes, and reports the
pod's phase, podIP and container states (running, terminated with exit code and termination
message, restarts) through the pods/status subresource. The Job and ReplicaSet controllers, the
garbage collector and the API server's admission are the real ones; only the node is played.

What a node would provide, stood in for locally:
- each pod has its own loopback address (127.X.Y.Z) as podIP, and `0.0.0.0` in its command means
  that address, so two pods can listen on one port as they can in a cluster;
- a Service name (`svc.ns.svc[.cluster.local]`) in a command or environment value is the podIP of
  a running pod the Service selects (the pod waits in ContainerCreating until there is one); the
  same names are written to `hosts.json` for processes outside the node (tests/cluster/resolver);
- each volume is a directory: a ConfigMap's or Secret's keys as files, a claim shared by name
  under `claims/`, an emptyDir per pod, and the service-account token projected by admission is
  fetched by the TokenRequest API; a container that mounts it gets a kubeconfig with that token
  (the local stand-in for in-cluster configuration, whose paths are fixed under /var/run);
- a mount path at the start of a command argument, an environment value or the termination
  message path is that directory; `$(VAR)` expands as the kubelet expands it.
Images are not pulled: `dagperf` and `dagperf-operator` run from the installed project.

The pods' containers as the kubelet runs them, from their images, are the real node's
(tests/test_real_node.py); this node is the fast lane of the cluster tests.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import re
import signal
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from control_plane import ApiError, Client, ControlPlane
from image_runtime import Mount

BIN = Path(sys.executable).parent  # the image's entry points, installed in this environment
TERMINATION_LIMIT = 4096  # bytes of a termination message the kubelet keeps
RESOLVER = Path(__file__).parent / "cluster" / "resolver"
SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Launch:
    """What starting a container takes: its command and environment as this node runs them,
    where its termination message lands, and its mounts (host directory or file by path)."""

    command: list[str]
    env: dict[str, str]
    termination: Path
    mounts: dict[str, Mount]


@dataclass
class LocalPod:
    namespace: str
    name: str
    uid: str
    ip: str
    directory: Path
    task: asyncio.Task | None = None
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    probe_failures: int = 0  # restarts a failing probe caused
    stopping: bool = False
    exits: list[int] = field(default_factory=list)


class Node:
    def __init__(
        self,
        plane: ControlPlane,
        client: Client,
        root: Path,
        name: str,
        namespaces: set[str],
    ):
        self.plane = plane
        self.api = client
        self.root = root
        self.name = name
        self.namespaces = namespaces  # where it schedules pods: the test's own
        self.pods: dict[str, LocalPod] = {}  # by uid
        self.started: list[str] = []  # the name of every pod ever started here
        self.errors: list[str] = []  # API calls that failed, shown with the pods' output
        # Service names -> pod addresses, for outside processes (the file is replaced whole at
        # each change)
        self.hosts = root / "dns" / "hosts.json"
        # Pod addresses of this test session's own (127.0.0.0/8 is all loopback), so a suite
        # running beside this one does not hand out the same ones.
        network = 10 + os.getpid() % 240
        self._addresses = (f"127.{network}.{n // 250}.{n % 250 + 1}" for n in itertools.count())
        self._loop: asyncio.Task | None = None

    def claim(self, name: str) -> Path:
        """The directory standing in for a PersistentVolumeClaim."""
        return self.root / "claims" / name

    def pod(self, namespace: str, name: str) -> LocalPod:
        return next(p for p in self.pods.values() if (p.namespace, p.name) == (namespace, name))

    def output(self) -> str:
        """Every pod's output, for the message of a failing test."""
        logs = [
            f"--- {pod.namespace}/{pod.name}\n"
            + (pod.directory / "output.log").read_text(errors="replace")
            for pod in self.pods.values()
            if (pod.directory / "output.log").exists()
        ]
        return "\n".join([f"--- node: {e}" for e in self.errors[-5:]] + logs)

    async def __aenter__(self) -> Node:
        self.hosts.parent.mkdir(parents=True, exist_ok=True)
        self.hosts.write_text("{}")
        await self._register()
        self._loop = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._loop is not None
        await cancelled(self._loop)
        await asyncio.gather(*(self._stop(pod) for pod in list(self.pods.values())))
        for pod in await self.api.items(f"/api/v1/pods?fieldSelector=spec.nodeName={self.name}"):
            meta = pod["metadata"]  # the node is going away, and its pods with it
            await self.api.delete(
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                {"gracePeriodSeconds": 0},
            )
        await self.api.delete(f"/api/v1/nodes/{self.name}")

    async def _register(self) -> None:
        capacity = {"cpu": "64", "memory": "256Gi", "pods": "250", "ephemeral-storage": "100Gi"}
        await self.api.create("/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "labels": {"kubernetes.io/hostname": self.name}},
        })  # fmt: skip
        await self.api.patch(f"/api/v1/nodes/{self.name}/status", {"status": {
            "capacity": capacity, "allocatable": capacity,
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "the suite's stand-in kubelet",
                            "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}],
        }})  # fmt: skip

    async def _run(self) -> None:
        while True:
            try:
                await self._sync()
            except (aiohttp.ClientError, ApiError) as e:  # the next round tries again
                self.errors.append(str(e))
            await asyncio.sleep(0.1)

    async def _sync(self) -> None:
        pods = await self.api.items("/api/v1/pods")
        present = set()
        for pod in pods:
            meta, spec = pod["metadata"], pod["spec"]
            if not spec.get("nodeName"):
                if meta["namespace"] in self.namespaces and not meta.get("deletionTimestamp"):
                    await self._bind(pod)
                continue
            if spec["nodeName"] != self.name:
                continue
            present.add(meta["uid"])
            local = self.pods.get(meta["uid"])
            if meta.get("deletionTimestamp"):
                if local is not None:
                    await self._stop(local)
                    del self.pods[meta["uid"]]
                # The kubelet's last word: the pod's containers are gone, remove it for good.
                await self.api.delete(
                    f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                    {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
                )
            elif local is None and pod.get("status", {}).get("phase") not in (
                "Succeeded",
                "Failed",
            ):
                self._start(pod)
        for uid, local in list(self.pods.items()):
            if uid not in present:  # deleted without us
                await self._stop(local)
                del self.pods[uid]
        await self._publish(pods)

    async def _bind(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        await self.api.request(
            "POST",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": self.name},
            },
        )  # fmt: skip  (a conflict means it is bound already; the next sync sees it)

    async def _publish(self, pods: list[dict[str, Any]]) -> None:
        hosts: dict[str, str] = {}
        for service in await self.api.items("/api/v1/services"):
            meta = service["metadata"]
            if (ip := self._backing(service, pods)) is not None:
                name = f"{meta['name']}.{meta['namespace']}.svc"
                hosts[name] = hosts[name + ".cluster.local"] = ip
        part = self.hosts.with_suffix(".part")
        part.write_text(json.dumps(hosts))
        part.replace(self.hosts)

    def _backing(self, service: dict[str, Any], pods: list[dict[str, Any]]) -> str | None:
        """The address of a running pod the Service selects, as its endpoints would hold."""
        selector = service["spec"].get("selector") or {}
        if not selector:
            return None
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            local = self.pods.get(pod["metadata"]["uid"])
            if (
                pod["metadata"]["namespace"] == service["metadata"]["namespace"]
                and selector.items() <= labels.items()
                and local is not None
                and local.process is not None
                and local.process.returncode is None
            ):
                return local.ip
        return None

    # --- a pod's life -------------------------------------------------------------------------

    def _start(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        directory = self.root / "pods" / meta["namespace"] / meta["name"]
        local = LocalPod(meta["namespace"], meta["name"], meta["uid"], next(self._addresses),
                         directory)  # fmt: skip
        self.pods[meta["uid"]] = local
        self.started.append(meta["name"])
        local.task = asyncio.create_task(self._live(local, pod))

    async def _live(self, local: LocalPod, pod: dict[str, Any]) -> None:
        spec = pod["spec"]
        (container,) = spec["containers"]
        restart = spec.get("restartPolicy", "Always")
        while True:
            try:
                launch = await self._prepare(local, pod, container)
                break
            except LookupError as e:  # a missing ConfigMap or Secret: the pod waits for it
                waiting = {"reason": "CreateContainerConfigError", "message": str(e)}
                await self._report(local, container, "Pending", {"waiting": waiting})
                await asyncio.sleep(1)
        if spec.get("initContainers") and not await self._initialize(local, pod, container):
            return
        last: dict[str, Any] | None = None
        termination = launch.termination
        while not local.stopping:
            termination.unlink(missing_ok=True)
            with (local.directory / "output.log").open("ab") as log:
                local.process = await self._spawn(local, pod, container, launch, log)
            running = {"running": {"startedAt": _now()}}
            probed = "startupProbe" in container
            await self._report(local, container, "Running", running, last, ready=not probed)
            prober = asyncio.create_task(self._probe(local, container, running, last))
            code = await local.process.wait()
            prober.cancel()
            code = 128 - code if code < 0 else code  # killed by a signal, as a runtime reports it
            local.exits.append(code)
            if local.stopping:
                return
            written = termination.read_bytes() if termination.exists() else b""
            last = {"terminated": {
                "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "message": written[:TERMINATION_LIMIT].decode(errors="replace"),
                "finishedAt": _now(),
            }}  # fmt: skip
            again = restart == "Always" or (restart == "OnFailure" and code != 0)
            if not again:
                await self._report(local, container, "Succeeded" if code == 0 else "Failed", last)
                return
            local.restarts += 1
            await self._report(local, container, "Running",
                               {"waiting": {"reason": "CrashLoopBackOff"}}, last)  # fmt: skip
            await asyncio.sleep(min(0.5 * local.restarts, 5))

    async def _initialize(
        self, local: LocalPod, pod: dict[str, Any], container: dict[str, Any]
    ) -> bool:
        """Run the init containers in order, each to its end, before the container, as the
        kubelet does. The first that fails fails the pod (the operator's Job pods restart
        Never), with its termination message: what it wrote, or under FallbackToLogsOnError
        its log's end."""
        done: list[dict[str, Any]] = []
        initializing = {"waiting": {"reason": "PodInitializing"}}
        for init in pod["spec"]["initContainers"]:
            launch = await self._prepare(local, pod, init)
            termination = launch.termination
            termination.unlink(missing_ok=True)
            output = local.directory / f"{init['name']}.log"
            with output.open("ab") as log:
                local.process = await self._spawn(local, pod, init, launch, log)
            code = await local.process.wait()
            if local.stopping:
                return False
            message = termination.read_bytes() if termination.exists() else b""
            termination.unlink(missing_ok=True)
            if (
                code
                and not message
                and init.get("terminationMessagePolicy") == ("FallbackToLogsOnError")
            ):
                message = b"\n".join(output.read_bytes().splitlines()[-80:])[-2048:]
            done.append({
                "name": init["name"], "image": init["image"], "imageID": "", "ready": code == 0,
                "restartCount": 0, "state": {"terminated": {
                    "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                    "message": message[:TERMINATION_LIMIT].decode(errors="replace"),
                    "finishedAt": _now(),
                }},
            })  # fmt: skip
            if code:
                await self._report(local, container, "Failed", initializing, inits=done)
                return False
        await self._report(local, container, "Pending", initializing, inits=done)
        return True

    async def _probe(
        self,
        local: LocalPod,
        container: dict[str, Any],
        running: dict[str, Any],
        last: dict[str, Any] | None,
    ) -> None:
        """The container's HTTP probes, as the kubelet runs them: ready once the startup probe
        answers 2xx/3xx; restarted after failureThreshold failures in a row of its startup
        probe before that, or of its liveness probe after."""
        startup = container.get("startupProbe")
        liveness = container.get("livenessProbe")
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
        async with aiohttp.ClientSession() as session:
            for probe, becomes_ready in ((startup, True), (liveness, False)):
                if probe is None or "httpGet" not in probe:
                    continue
                get = probe["httpGet"]
                port = ports.get(get["port"], get["port"])
                url = f"http://{local.ip}:{port}{get.get('path', '/')}"
                failures = 0
                while failures < probe.get("failureThreshold", 3):
                    await asyncio.sleep(probe.get("periodSeconds", 10) if failures else 0.2)
                    try:
                        timeout = aiohttp.ClientTimeout(total=probe.get("timeoutSeconds", 1))
                        async with session.get(url, timeout=timeout) as answer:
                            ok = answer.status < 400
                    except (aiohttp.ClientError, TimeoutError):
                        ok = False
                    failures = 0 if ok else failures + 1
                    if ok and becomes_ready:
                        await self._report(local, container, "Running", running, last)
                        break
                    if ok:
                        await asyncio.sleep(probe.get("periodSeconds", 10))
                else:
                    local.probe_failures += 1
                    self._kill(local)
                    return

    async def _stop(self, local: LocalPod) -> None:
        """SIGTERM to the container's process group, then SIGKILL after the grace period."""
        local.stopping = True
        process = local.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
        if local.task is not None and local.task is not asyncio.current_task():
            local.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await local.task

    def kill(self, namespace: str, name: str) -> None:
        """SIGKILL a pod's container, as a crash or the OOM killer would."""
        local = self.pod(namespace, name)
        assert local.process is not None and local.process.returncode is None
        self._kill(local)

    def _kill(self, local: LocalPod) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(local.process.pid, signal.SIGKILL)  # type: ignore[union-attr]

    async def _report(
        self,
        local: LocalPod,
        container: dict[str, Any],
        phase: str,
        state: dict[str, Any],
        last: dict[str, Any] | None = None,
        ready: bool = True,
        inits: list[dict[str, Any]] | None = None,
    ) -> None:
        """The pod's status; `inits`, its init containers' (left as they are when None)."""
        ready = ready and "running" in state
        initialized = all(i["state"]["terminated"]["exitCode"] == 0 for i in inits or [])
        status = {
            "name": container["name"], "image": container["image"], "imageID": "",
            "ready": ready, "started": ready, "restartCount": local.restarts,
            "state": state, "lastState": last or {},
        }  # fmt: skip
        conditions = [
            {"type": kind, "status": "True" if ok else "False", "lastTransitionTime": _now()}
            for kind, ok in (("PodScheduled", True), ("Initialized", initialized),
                             ("ContainersReady", ready), ("Ready", ready))
        ]  # fmt: skip
        await self.api.request(
            "PATCH",
            f"/api/v1/namespaces/{local.namespace}/pods/{local.name}/status",
            {
                "status": {
                    "phase": phase,
                    "hostIP": "127.0.0.1",
                    "podIP": local.ip,
                    "podIPs": [{"ip": local.ip}],
                    "startTime": _now(),
                    "conditions": conditions,
                    "containerStatuses": [status],
                    **({"initContainerStatuses": inits} if inits is not None else {}),
                }
            },
            content_type="application/merge-patch+json",
        )  # fmt: skip  (a pod deleted meanwhile answers 404: nothing left to report)

    # --- what a container sees ----------------------------------------------------------------

    async def _prepare(
        self, local: LocalPod, pod: dict[str, Any], container: dict[str, Any]
    ) -> Launch:
        spec = pod["spec"]
        local.directory.mkdir(parents=True, exist_ok=True)
        volumes = {v["name"]: await self._volume(v, local, pod) for v in spec.get("volumes") or []}
        mounts = {
            m["mountPath"]: Mount(volumes[m["name"]], m.get("readOnly", False))
            for m in container.get("volumeMounts") or []
        }
        termination = local.directory / "termination-log"
        mounts[container.get("terminationMessagePath", "/dev/termination-log")] = Mount(termination)
        env = self._process_env(local, mounts)
        for variable in container.get("env") or []:
            value = await self._value(variable, local)
            env[variable["name"]] = await self._local(expand(value, env), mounts, local)
        command = [
            await self._local(expand(a, env), mounts, local)
            for a in (container.get("command") or []) + (container.get("args") or [])
        ]
        if (BIN / command[0]).exists():
            command[0] = str(BIN / command[0])
        return Launch(command, env, termination, mounts)

    def _process_env(self, local: LocalPod, mounts: dict[str, Mount]) -> dict[str, str]:
        env = {
            "PATH": f"{BIN}:{os.environ['PATH']}",
            "PYTHONPATH": str(RESOLVER),  # the cluster's DNS, for Python's own look-ups
            "DAGPERF_TEST_HOSTS": str(self.hosts),
            "DAGPERF_TEST_NAMESPACE": local.namespace,  # short names resolve in it
        }
        if SERVICE_ACCOUNT_MOUNT in mounts:
            token = (mounts[SERVICE_ACCOUNT_MOUNT].host / "token").read_text()
            env["KUBECONFIG"] = str(
                self.plane.token_kubeconfig(token, local.directory / "kubeconfig")
            )
        return env

    async def _spawn(
        self, local: LocalPod, pod: dict[str, Any], container: dict[str, Any], launch: Launch, log
    ) -> asyncio.subprocess.Process:
        """Start a container: its command as a local process."""
        return await asyncio.create_subprocess_exec(
            *launch.command, env=launch.env, cwd=local.directory, stdout=log,
            stderr=asyncio.subprocess.STDOUT, preexec_fn=os.setpgrp,
        )  # fmt: skip

    async def _volume(self, volume: dict[str, Any], local: LocalPod, pod: dict[str, Any]) -> Path:
        path = local.directory / "volumes" / volume["name"]
        if "persistentVolumeClaim" in volume:
            path = self.claim(volume["persistentVolumeClaim"]["claimName"])
        elif "configMap" in volume:
            await self._config_map(volume["configMap"], local.namespace, path)
        elif "secret" in volume:
            await self._secret(volume["secret"], local.namespace, path)
        elif "projected" in volume:
            for source in volume["projected"]["sources"]:
                if "serviceAccountToken" in source:
                    token = await self._token(pod, source["serviceAccountToken"])
                    _write(path / source["serviceAccountToken"]["path"], token.encode(), 0o600)
                elif "configMap" in source:
                    await self._config_map(source["configMap"], local.namespace, path)
                elif "downwardAPI" in source:
                    for item in source["downwardAPI"]["items"]:
                        field = item["fieldRef"]["fieldPath"]
                        value = {"metadata.namespace": local.namespace}[field]
                        _write(path / item["path"], value.encode())
        elif "emptyDir" not in volume:
            raise AssertionError(f"no local stand-in for volume {volume}")
        path.mkdir(parents=True, exist_ok=True)
        return path

    async def _config_map(self, source: dict[str, Any], namespace: str, path: Path) -> None:
        name = source["name"]
        found = await self.api.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
        if found is None:
            raise LookupError(f'configmap "{name}" not found')
        files = {k: v.encode() for k, v in (found.get("data") or {}).items()}
        files |= {k: base64.b64decode(v) for k, v in (found.get("binaryData") or {}).items()}
        items = source.get("items") or [{"key": key, "path": key} for key in files]
        for item in items:
            _write(path / item["path"], files[item["key"]])

    async def _secret(self, source: dict[str, Any], namespace: str, path: Path) -> None:
        name = source["secretName"]
        found = await self.api.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
        if found is None:
            raise LookupError(f'secret "{name}" not found')
        data = found.get("data") or {}
        items = source.get("items") or [{"key": key, "path": key} for key in data]
        for item in items:  # only the items named, as a kubelet projects them
            mode = (
                source.get("defaultMode", 0o644) & 0o700
            )  # the owner is the pod's user, this node's
            _write(path / item["path"], base64.b64decode(data[item["key"]]), mode)

    async def _token(self, pod: dict[str, Any], source: dict[str, Any]) -> str:
        """The pod's service-account token, bound to the pod, as the kubelet requests it."""
        meta = pod["metadata"]
        account = pod["spec"].get("serviceAccountName", "default")
        answer = await self.api.create(
            f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {
                "expirationSeconds": source.get("expirationSeconds", 3607),
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                   "uid": meta["uid"]},
            }},
        )  # fmt: skip
        return answer["status"]["token"]

    async def _value(self, variable: dict[str, Any], local: LocalPod) -> str:
        if "value" in variable:
            return variable["value"]
        source = variable["valueFrom"]
        if "fieldRef" in source:
            fields = {"metadata.name": local.name, "metadata.namespace": local.namespace,
                      "status.podIP": local.ip, "metadata.uid": local.uid}  # fmt: skip
            return fields[source["fieldRef"]["fieldPath"]]
        kind, ref = next((k, source[k]) for k in ("secretKeyRef", "configMapKeyRef") if k in source)
        plural = "secrets" if kind == "secretKeyRef" else "configmaps"
        found = await self.api.get(f"/api/v1/namespaces/{local.namespace}/{plural}/{ref['name']}")
        if found is None:
            raise LookupError(f'{plural[:-1]} "{ref["name"]}" not found')
        if kind == "secretKeyRef":
            return base64.b64decode(found["data"][ref["key"]]).decode()
        return found["data"][ref["key"]]

    async def _local(self, value: str, mounts: dict[str, Mount], local: LocalPod) -> str:
        """A value as this node needs it: mount paths, Service names and 0.0.0.0 mapped."""
        for mount in sorted(mounts, key=len, reverse=True):
            if value == mount or value.startswith(mount + "/"):
                value = str(mounts[mount].host) + value[len(mount) :]
                break
        for match in set(re.findall(r"[a-z0-9-]+\.[a-z0-9-]+\.svc(?:\.cluster\.local)?", value)):
            value = value.replace(match, await self._resolve(match))
        return value.replace("0.0.0.0", local.ip)

    async def _resolve(self, host: str, timeout: float = 60) -> str:
        """A Service's address once a pod backs it (a container that cannot resolve its
        scheduler would crash and restart; waiting is the quiet form of the same)."""
        async with asyncio.timeout(timeout):
            while True:
                known = json.loads(self.hosts.read_text())
                if host in known:
                    return known[host]
                await asyncio.sleep(0.1)


async def cancelled(task: asyncio.Task[Any]) -> None:
    """Cancel a task until it is done, and raise what it failed with: on Python 3.11,
    asyncio.wait_for (stopping a pod's process) swallows a cancellation that lands as the
    process exits, and the task would run on."""
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=1)
    if not task.cancelled() and (error := task.exception()) is not None:
        raise error


def _write(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


def expand(value: str, env: dict[str, str]) -> str:
    """`$(NAME)` replaced by an earlier variable, as Kubernetes expands commands and env."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), value)
