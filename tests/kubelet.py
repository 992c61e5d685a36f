"""The parts of a cluster that run pods, played by the test suite for what the operator creates.

For each dagperf Job and Deployment in a namespace, `Kubelet` does what the Job and ReplicaSet
controllers and a kubelet would: it creates the Pod objects, runs each init container's command
to its end and then starts the container's, each with its environment as a local process, and
writes the pods' status back through the API (running, then terminated with its exit code and
termination message), then the Job's. A
Deployment scaled down, or a Job deleted, has its processes stopped and its pods deleted.

What a node would provide, stood in for locally: Service names (`<name>.<namespace>.svc`) and
`0.0.0.0` are 127.0.0.1, so the operator must be told free ports; each volume is a directory
(a ConfigMap's or Secret's files written out, a claim shared by name under `claims/`, an
emptyDir per pod), and each mount path in a command, an environment value or the termination
message path is that directory; `$(VAR)` in a command expands as the kubelet expands it;
`valueFrom` reads the pod's name or the named Secret. Processes see only the container's
environment (and PATH).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import re
import signal
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from emulator import Api

DAGPERF = str(Path(sys.executable).with_name("dagperf"))  # the image's entry point, installed
TERMINATION_LIMIT = 4096  # bytes of a termination message the kubelet keeps


def expand(value: str, env: dict[str, str]) -> str:
    """`$(NAME)` replaced by an earlier variable, as Kubernetes expands commands and env."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), value)


async def cancelled(task: asyncio.Task[Any]) -> None:
    """Cancel a task until it is done, and raise what it failed with: on Python 3.11,
    asyncio.wait_for (stopping a pod's process) swallows a cancellation that lands as the
    process exits, and the task would run on."""
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=1)
    if not task.cancelled() and (error := task.exception()) is not None:
        raise error


@dataclass
class LocalPod:
    name: str
    owner: tuple[str, str]  # (kind, name) of the Job or Deployment
    process: asyncio.subprocess.Process
    directory: Path
    termination: Path
    stopping: bool = False


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Kubelet:
    def __init__(self, api: Api, namespace: str, root: Path):
        self.api = api
        self.namespace = namespace
        self.root = root
        self.pods: dict[str, LocalPod] = {}  # running, or ended but not deleted
        self.started: list[str] = []  # every pod ever started, by name
        self._jobs_started: set[str] = set()
        self._names = itertools.count(1)
        self._tasks: set[asyncio.Task] = set()
        self._loop: asyncio.Task | None = None

    def claim(self, name: str) -> Path:
        """The directory standing in for a PersistentVolumeClaim."""
        return self.root / "claims" / name

    def output(self) -> str:
        """Every pod's output, for the message of a failing test."""
        return "\n".join(
            f"--- {pod.name}\n{(pod.directory / 'output.log').read_text(errors='replace')}"
            for pod in self.pods.values()
        )

    async def __aenter__(self) -> Kubelet:
        self._loop = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._loop is not None
        await cancelled(self._loop)
        for pod in list(self.pods.values()):
            await self._terminate(pod)
        for task in list(self._tasks):
            task.cancel()

    async def _run(self) -> None:
        while True:
            await self._sync()
            await asyncio.sleep(0.05)

    # --- the controllers --------------------------------------------------------------------

    async def _sync(self) -> None:
        jobs = await self._list(f"/apis/batch/v1/namespaces/{self.namespace}/jobs")
        deployments = await self._list(f"/apis/apps/v1/namespaces/{self.namespace}/deployments")
        owners = {("Job", j["metadata"]["name"]) for j in jobs}
        owners |= {("Deployment", d["metadata"]["name"]) for d in deployments}
        for job in jobs:
            name = job["metadata"]["name"]
            if name not in self._jobs_started:
                self._jobs_started.add(name)
                await self._start(f"{name}-{next(self._names):05d}", job, ("Job", name))
        for deployment in deployments:
            name = deployment["metadata"]["name"]
            mine = [p for p in self.pods.values() if p.owner == ("Deployment", name)]
            wanted = deployment["spec"].get("replicas", 1)
            for _ in range(wanted - len(mine)):
                pod = f"{name}-7d4b9c-{next(self._names):05d}"
                await self._start(pod, deployment, ("Deployment", name))
            for pod in mine[wanted:]:
                await self._delete(pod)
        for pod in list(self.pods.values()):
            if pod.owner not in owners:  # its owner was deleted
                await self._delete(pod)

    async def _list(self, path: str) -> list[dict[str, Any]]:
        found = await self.api.get(path)
        return [
            o
            for o in (found or {}).get("items") or []
            if o["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "dagperf"
        ]

    # --- the kubelet ------------------------------------------------------------------------

    async def _start(self, name: str, owner: dict[str, Any], ref: tuple[str, str]) -> None:
        template = owner["spec"]["template"]
        spec = template["spec"]
        (container,) = spec["containers"]
        directory = self.root / "pods" / name
        directory.mkdir(parents=True)
        volumes = {v["name"]: await self._volume(v, directory) for v in spec.get("volumes", [])}
        inits = spec.get("initContainers", [])
        status = (
            {"phase": "Pending", "containerStatuses": [_waiting(container, "PodInitializing")]}
            if inits
            else {"phase": "Running", "containerStatuses": [_status(container, None)]}
        )
        await self.api.create(
            f"/api/v1/namespaces/{self.namespace}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": self.namespace,
                    "labels": template["metadata"]["labels"],
                    "ownerReferences": [_owner_reference(ref[0], owner)],
                },
                "spec": spec | {"nodeName": "local"},
                "status": status,
            },
        )
        if inits and not await self._initialize(name, ref, container, inits, volumes, directory):
            return
        command, env, termination = await self._prepare(container, volumes, name, directory)
        with (directory / "output.log").open("wb") as log:
            process = await asyncio.create_subprocess_exec(
                *command, env=env, cwd=directory, stdout=log, stderr=asyncio.subprocess.STDOUT
            )
        pod = LocalPod(name, ref, process, directory, termination)
        self.pods[name] = pod
        self.started.append(name)
        task = asyncio.create_task(self._watch(pod, container))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _initialize(
        self, pod: str, ref: tuple[str, str], container: dict[str, Any],
        inits: list[dict[str, Any]], volumes: dict[str, Path], directory: Path,
    ) -> bool:  # fmt: skip
        """Run the init containers in order, each to its end, as the kubelet does before the
        container starts. The first to fail fails the pod (its restartPolicy is Never here)
        and its Job, with its message: what it wrote, or under FallbackToLogsOnError its
        log's end. (This stand-in holds its sync loop meanwhile; a kubelet would not.)"""
        path = f"/api/v1/namespaces/{self.namespace}/pods/{pod}"
        done = []
        for init in inits:
            command, env, termination = await self._prepare(init, volumes, pod, directory)
            output = directory / f"{init['name']}.log"
            with output.open("wb") as log:
                process = await asyncio.create_subprocess_exec(
                    *command, env=env, cwd=directory, stdout=log, stderr=asyncio.subprocess.STDOUT
                )
            code = await process.wait()
            message = termination.read_bytes() if termination.exists() else b""
            if (
                code != 0
                and not message
                and (init.get("terminationMessagePolicy") == "FallbackToLogsOnError")
            ):
                message = b"\n".join(output.read_bytes().splitlines()[-80:])[-2048:]
            terminated = {
                "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "message": message[:TERMINATION_LIMIT].decode(errors="replace"),
                "finishedAt": _now(),
            }  # fmt: skip
            done.append(_status(init, terminated))
            if code != 0:
                await self.api.patch(path, {"status": {
                    "phase": "Failed", "initContainerStatuses": done,
                }})  # fmt: skip
                await self._job_ended(ref, code)
                return False
        await self.api.patch(path, {"status": {
            "phase": "Running", "initContainerStatuses": done,
            "containerStatuses": [_status(container, None)],
        }})  # fmt: skip
        return True

    async def _prepare(
        self, container: dict[str, Any], volumes: dict[str, Path], pod: str, directory: Path
    ) -> tuple[list[str], dict[str, str], Path]:
        """A container's command and environment as this machine runs them, and the file that
        stands in for its termination message path."""
        mounts = {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])}
        termination = directory / f"termination-log-{container['name']}"
        mounts[container.get("terminationMessagePath", "/dev/termination-log")] = termination
        env = {"PATH": os.environ["PATH"]}
        for variable in container.get("env", []):
            value = await self._value(variable, pod)
            env[variable["name"]] = self._local(expand(value, env), mounts)
        command = [
            self._local(expand(a, env), mounts)
            for a in container["command"] + container.get("args", [])
        ]
        if command[0] == "dagperf":
            command[0] = DAGPERF
        return command, env, termination

    async def _watch(self, pod: LocalPod, container: dict[str, Any]) -> None:
        """When the process ends, report it as the kubelet does: the pod, then its Job."""
        code = await pod.process.wait()
        if pod.stopping:
            return
        written = pod.termination.read_bytes() if pod.termination.exists() else b""
        message = written[:TERMINATION_LIMIT].decode(errors="replace")
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "message": message,
            "finishedAt": _now(),
        }
        path = f"/api/v1/namespaces/{self.namespace}/pods/{pod.name}"
        await self.api.patch(path, {"status": {
            "phase": "Succeeded" if code == 0 else "Failed",
            "containerStatuses": [_status(container, terminated)],
        }})  # fmt: skip
        await self._job_ended(pod.owner, code)

    async def _job_ended(self, ref: tuple[str, str], code: int) -> None:
        kind, owner = ref
        if kind == "Job":
            condition = "Complete" if code == 0 else "Failed"
            await self.api.patch(
                f"/apis/batch/v1/namespaces/{self.namespace}/jobs/{owner}",
                {"status": {
                    "succeeded" if code == 0 else "failed": 1,
                    "conditions": [{"type": condition, "status": "True",
                                    "lastTransitionTime": _now()}],
                }},
            )  # fmt: skip

    async def _delete(self, pod: LocalPod) -> None:
        await self._terminate(pod)
        await self.api.delete(f"/api/v1/namespaces/{self.namespace}/pods/{pod.name}")
        del self.pods[pod.name]

    async def _terminate(self, pod: LocalPod) -> None:
        """SIGTERM, then SIGKILL after the grace period, as the kubelet stops a container."""
        pod.stopping = True
        if pod.process.returncode is None:
            pod.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(pod.process.wait(), 10)
            except TimeoutError:
                pod.process.kill()
                await pod.process.wait()

    async def _volume(self, volume: dict[str, Any], directory: Path) -> Path:
        if "persistentVolumeClaim" in volume:
            path = self.claim(volume["persistentVolumeClaim"]["claimName"])
        elif "configMap" in volume:
            path = directory / "volumes" / volume["name"]
            name = volume["configMap"]["name"]
            found = await self.api.get(f"/api/v1/namespaces/{self.namespace}/configmaps/{name}")
            assert found is not None, f"pod mounts configmap/{name}, which does not exist"
            path.mkdir(parents=True)
            for key, text in (found.get("data") or {}).items():
                (path / key).write_text(text)
            for key, packed in (found.get("binaryData") or {}).items():
                (path / key).write_bytes(base64.b64decode(packed))
        elif "secret" in volume:
            path = directory / "volumes" / volume["name"]
            source = volume["secret"]
            name = source["secretName"]
            found = await self.api.get(f"/api/v1/namespaces/{self.namespace}/secrets/{name}")
            assert found is not None, f"pod mounts secret/{name}, which does not exist"
            data = found.get("data") or {}
            items = source.get("items") or [{"key": key, "path": key} for key in data]
            path.mkdir(parents=True)
            for item in items:  # only the items named, as a kubelet projects them
                file = path / item["path"]
                file.write_bytes(base64.b64decode(data[item["key"]]))
                file.chmod(source.get("defaultMode", 0o644) & 0o700)  # the owner is the pod's user
        elif "emptyDir" in volume:
            path = directory / "volumes" / volume["name"]
        else:
            raise AssertionError(f"no local stand-in for volume {volume}")
        path.mkdir(parents=True, exist_ok=True)
        return path

    async def _value(self, variable: dict[str, Any], pod: str) -> str:
        if "value" in variable:
            return variable["value"]
        source = variable["valueFrom"]
        if "fieldRef" in source:
            fields = {"metadata.name": pod, "metadata.namespace": self.namespace}
            return fields[source["fieldRef"]["fieldPath"]]
        ref = source["secretKeyRef"]
        secret = await self.api.get(f"/api/v1/namespaces/{self.namespace}/secrets/{ref['name']}")
        assert secret is not None, f"pod needs secret/{ref['name']}, which does not exist"
        return base64.b64decode(secret["data"][ref["key"]]).decode()

    def _local(self, value: str, mounts: dict[str, Path]) -> str:
        """A value as this machine needs it: mount paths, Service names and 0.0.0.0 mapped."""
        for mount in sorted(mounts, key=len, reverse=True):
            if value == mount or value.startswith(mount + "/"):
                value = str(mounts[mount]) + value[len(mount) :]
                break
        value = re.sub(rf"[a-z0-9-]+\.{self.namespace}\.svc(\.cluster\.local)?", "127.0.0.1", value)
        return value.replace("0.0.0.0", "127.0.0.1")


def _owner_reference(kind: str, owner: dict[str, Any]) -> dict[str, Any]:
    """(A Deployment's pods belong to a ReplicaSet in a cluster; no ReplicaSet is played here.)"""
    meta = owner["metadata"]
    api_version = {"Job": "batch/v1", "Deployment": "apps/v1"}[kind]  # lists omit it
    return {"apiVersion": api_version, "kind": kind, "name": meta["name"], "uid": meta["uid"],
            "controller": True}  # fmt: skip


def _waiting(container: dict[str, Any], reason: str) -> dict[str, Any]:
    return _status(container, None) | {
        "ready": False,
        "started": False,
        "state": {"waiting": {"reason": reason}},
    }


def _status(container: dict[str, Any], terminated: dict[str, Any] | None) -> dict[str, Any]:
    state = {"terminated": terminated} if terminated else {"running": {"startedAt": _now()}}
    return {
        "name": container["name"],
        "image": container["image"],
        "imageID": "",
        "ready": terminated is None,
        "restartCount": 0,
        "started": terminated is None,
        "state": state,
    }
