"""The session's real node itself (tests/cluster/up.sh with DAGPERF_CLUSTER_NODE=real): a kubelet on
containerd that reports Ready, pods placed by kube-scheduler and started from the project's
imported image, a Service reached by its cluster DNS name through kube-proxy, a claim given a
local volume made for it that a non-root pod writes, the quick start and a node's failures (a
worker OOM-killed, a worker pod deleted, the scheduler killed), and nothing left once down.sh
has run, which the last cluster test of the session checks."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from dagperf_operator.manifests import Names

import image_runtime
from control_plane import ROOT, established, namespace
from real_node import (
    BRIDGE,
    IMAGE,
    NODE,
    NODE_IP,
    Machine,
    claim_directory,
    install_operator,
    kill,
    phase_is,
    pod,
    restricted,
)
from runs import alive, eventually, read_jsonl, serving

pytestmark = pytest.mark.cluster

PODS = "/api/v1/namespaces/{ns}/pods"


def ready(found: dict | None) -> bool:
    found_conditions = ((found or {}).get("status") or {}).get("conditions") or []
    conditions = {c["type"]: c["status"] for c in found_conditions}
    return conditions.get("Ready") == "True"


async def test_the_node_is_ready_with_a_kubelet_of_the_release_on_containerd_2(node):
    async with node.admin() as api:
        found = await eventually(lambda: api.get(f"/api/v1/nodes/{NODE}"), ready, timeout=60)
    info = found["status"]["nodeInfo"]
    assert info["kubeletVersion"] == "v1.36.3"
    assert info["containerRuntimeVersion"].startswith("containerd://2."), info
    assert found["spec"]["podCIDR"] == "10.244.0.0/24"
    (address,) = [a for a in found["status"]["addresses"] if a["type"] == "InternalIP"]
    assert address["address"] == NODE_IP
    listed = node.kubectl("get", "nodes", "--no-headers")
    assert listed.returncode == 0 and f"{NODE}   Ready" in listed.stdout, listed


async def test_a_pod_of_the_project_image_is_scheduled_and_run_by_containerd(node):
    async with node.admin() as api:
        ns = await namespace(api, "runs")
        await api.create(
            PODS.format(ns=ns),
            pod(
                "version",
                restricted({"name": "main", "command": ["dagperf", "--version"]}),
                restartPolicy="Never",
            ),
        )
        path = PODS.format(ns=ns) + "/version"
        done = await eventually(lambda: api.get(path), phase_is("Succeeded", "Failed"), 120)
        assert done["status"]["phase"] == "Succeeded", done["status"]
        assert done["spec"]["nodeName"] == NODE
        (status,) = done["status"]["containerStatuses"]
        assert status["containerID"].startswith("containerd://"), status
        assert done["status"]["podIP"].startswith("10.244.0."), done["status"]
        events = await api.items(f"/api/v1/namespaces/{ns}/events")
        scheduled = [e for e in events if e["reason"] == "Scheduled"]
        assert [e["reportingComponent"] for e in scheduled] == ["default-scheduler"], scheduled
    logs = node.kubectl("logs", "-n", ns, "version")  # through the kubelet's own server
    assert logs.returncode == 0 and logs.stdout.startswith("dagperf "), logs


SERVE = (
    "import http.server as h;"
    " h.ThreadingHTTPServer(('', 8080), h.SimpleHTTPRequestHandler).serve_forever()"
)
# A client as clients are: it tries again until kube-proxy has the Service's rules (a busy node
# takes a while), up to a minute.
FETCH = """
import time, urllib.request
for attempt in range(60):
    try:
        print(urllib.request.urlopen('http://web.{ns}.svc.cluster.local/', timeout=1).status)
        break
    except OSError as error:
        print(error)
        time.sleep(1)
"""


async def test_a_pod_reaches_another_pods_service_by_its_dns_name(node):
    async with node.admin() as api:
        ns = await namespace(api, "dns")
        server = restricted(
            {
                "name": "web",
                "command": ["python3", "-c", SERVE],
                "workingDir": "/tmp",
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
            }
        )
        await api.create(PODS.format(ns=ns), pod("web", server))
        await api.create(
            f"/api/v1/namespaces/{ns}/services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
            },
        )
        await eventually(lambda: api.get(PODS.format(ns=ns) + "/web"), ready, timeout=120)
        client = restricted({"name": "fetch", "command": ["python3", "-c", FETCH.format(ns=ns)]})
        await api.create(PODS.format(ns=ns), pod("fetch", client, restartPolicy="Never"))
        path = PODS.format(ns=ns) + "/fetch"
        done = await eventually(lambda: api.get(path), phase_is("Succeeded", "Failed"), 120)
    logs = node.kubectl("logs", "-n", ns, "fetch")
    assert done["status"]["phase"] == "Succeeded", (done["status"], logs.stdout, logs.stderr)
    assert logs.stdout.strip().splitlines()[-1] == "200"


WRITE = "import os; open('/results/written', 'w').write(str(os.getuid()))"


async def test_a_claim_gets_a_local_volume_made_for_it_that_a_non_root_pod_writes(node):
    """The default storage class's provisioner makes a volume for a claim once its pod is
    scheduled; the kubelet gives it to the pod's fsGroup; it goes with its claim."""
    async with node.admin() as api:
        ns = await namespace(api, "claims")
        await api.create(
            f"/api/v1/namespaces/{ns}/persistentvolumeclaims",
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "results"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
        )
        writer = restricted(
            {
                "name": "write",
                "command": ["python3", "-c", WRITE],
                "volumeMounts": [{"name": "results", "mountPath": "/results"}],
            }
        )
        volumes = [{"name": "results", "persistentVolumeClaim": {"claimName": "results"}}]
        await api.create(
            PODS.format(ns=ns), pod("write", writer, restartPolicy="Never", volumes=volumes)
        )
        path = PODS.format(ns=ns) + "/write"
        done = await eventually(lambda: api.get(path), phase_is("Succeeded", "Failed"), 120)
        assert done["status"]["phase"] == "Succeeded", done["status"]
        claim = await api.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/results")
        assert claim["status"]["phase"] == "Bound"
        volume = await api.get(f"/api/v1/persistentvolumes/{claim['spec']['volumeName']}")
        directory = await claim_directory(api, ns, "results")
        written = directory / "written"
        assert written.read_text() == "10001"
        assert written.stat().st_gid == 10001  # the volume is the pod's fsGroup's
        # Made for the claim by the provisioner, as the storage class says.
        assert volume["spec"]["storageClassName"] == "local"
        assert volume["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == (
            "rancher.io/local-path"
        )
        # Deleted with its claim (the class's reclaim policy), directory and all.
        await api.delete(f"/api/v1/namespaces/{ns}/pods/write")
        await api.delete(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/results")
        await api.gone(f"/api/v1/persistentvolumes/{volume['metadata']['name']}", timeout=120)
    assert not directory.exists()


async def test_the_quick_start_runs_on_the_node_with_results_on_a_local_volume(
    node, operator_stopped
):
    """The chart installed by helm (the operator as its Deployment, reaching the API server
    through the `kubernetes` Service), examples/simulator.yaml and examples/benchmark.yaml
    applied unchanged: the Benchmark's scheduler Job and worker Deployment run on the node,
    the workers reach the scheduler and the simulator by their Service names, and the export
    files land on the claim the operator made."""
    system, ns, name = "dagperf-system", "bench", "example"
    async with node.admin() as api:
        for each in (system, ns):
            await namespace(api, each)
        install_operator(node, "dagperf", system, ns)
        await established(api)
        try:
            for example in ("simulator.yaml", "benchmark.yaml"):
                applied = node.kubectl("apply", "-n", ns, "-f", str(ROOT / "examples" / example))
                assert applied.returncode == 0, applied.stderr
            done = await eventually(
                lambda: api.get(f"/apis/dagperf.io/v1alpha1/namespaces/{ns}/benchmarks/{name}"),
                lambda b: (b.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
                timeout=420,
            )
            pods = [*await api.items(PODS.format(ns=ns)), *await api.items(PODS.format(ns=system))]
            events = [
                *await api.items(f"/api/v1/namespaces/{ns}/events"),
                *await api.items(f"/api/v1/namespaces/{system}/events"),
            ]
            results = await claim_directory(api, ns, Names(name).claim) / name
        finally:  # the node's CPU is the next tests'
            node.helm("uninstall", "dagperf", "--namespace", system)
            node.kubectl("delete", "-n", ns, "-f", str(ROOT / "examples" / "simulator.yaml"))
    status = done["status"]
    assert status["phase"] == "Succeeded", status
    assert status["progress"]["requestsCompleted"] == 200  # the example's requestCount
    assert status["progress"]["errors"] == 0

    # Every pod, the workers' too (scaled down by now), placed by kube-scheduler.
    scheduled = [e["involvedObject"]["name"] for e in events if e["reason"] == "Scheduled"]
    assert {e["reportingComponent"] for e in events if e["reason"] == "Scheduled"} == {
        "default-scheduler"
    }
    prefixes = ("dagperf-operator-", "dagperf-simulator-", f"{name}-scheduler-", f"{name}-workers-")
    counts = {p: len([s for s in scheduled if s.startswith(p)]) for p in prefixes}
    assert counts == dict(zip(prefixes, (1, 1, 1, 2), strict=True)), scheduled
    # Each a container of the image the chart and the examples name, the one podman built.
    built = image_runtime.podman("image", "inspect", "--format={{.Id}}", IMAGE).stdout.strip()
    for found in pods:
        assert found["spec"]["nodeName"] == NODE
        for container in found["status"]["containerStatuses"]:
            assert container["containerID"].startswith("containerd://"), container
            assert container["imageID"].removeprefix("sha256:") == built, container

    records = read_jsonl(results / "profile_export.jsonl")
    assert len(records) == 200 and [r for r in records if r["error"]] == []
    exported = json.loads((results / "profile_export_aiperf.json").read_text())
    assert exported["request_count"]["avg"] == 200
    assert {p.stat().st_uid for p in results.iterdir()} == {10001}


async def watch(api, collection: str, into: list[dict]) -> None:
    """Every state of every object in `collection` from now on, appended to `into`."""
    async with api.session.get(f"{api.url}{collection}?watch=1") as r:
        async for line in r.content:
            if line.strip():
                into.append(json.loads(line)["object"])


BOMB = 1 << 30  # the reply that no worker under a 200 MiB limit can hold


class Endpoint:
    """A chat endpoint on the node's address, which pods reach: a short reply to every request,
    held while `gate` is closed, but to "BOMB", whose reply is a gigabyte."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.held: list[str] = []  # the addresses of the pods whose requests wait at the gate

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body["messages"][-1]["content"] == "BOMB":
            return await self.bomb(request)
        self.held.append(request.remote or "")
        try:
            await self.gate.wait()
        finally:
            self.held.remove(request.remote or "")
        return web.json_response({
            "id": "r", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "fine"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        })  # fmt: skip

    async def bomb(self, request: web.Request) -> web.StreamResponse:
        head, tail = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"', b'"}}]}'
        reply = web.StreamResponse(headers={"Content-Type": "application/json"})
        reply.content_length = len(head) + BOMB + len(tail)
        await reply.prepare(request)
        await reply.write(head)
        chunk = b"x" * (1 << 20)
        for _ in range(BOMB // len(chunk)):
            await reply.write(chunk)  # raises once the worker is gone
        await reply.write(tail)
        return reply

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        async with serving(app, NODE_IP) as url:  # the node's address, which pods reach
            try:
                yield url
            finally:
                self.gate.set()  # before the server's clean-up waits for what it holds


def sessions(*contents: str) -> list[dict]:
    return [
        {"session_id": f"s{i}", "turns": [{"messages": [{"role": "user", "content": c}]}]}
        for i, c in enumerate(contents)
    ]


async def launch(api, ns: str, name: str, url: str, dataset: list[dict], **spec) -> str:
    """A Benchmark of `dataset` against `url`, its results on a claim; the path to watch."""
    await api.create(f"/api/v1/namespaces/{ns}/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
        "data": {"data.dag.jsonl": "".join(f"{json.dumps(x)}\n" for x in dataset)},
    })  # fmt: skip
    body = {
        "endpoint": {"url": url, "model": "m", "type": "chat", "streaming": False},
        "dataset": {"configMapRef": {"name": name}},
        "workers": {"replicas": 2},
        "results": {"persistentVolumeClaim": {"size": "1Gi"}},
    }
    benchmarks = f"/apis/dagperf.io/v1alpha1/namespaces/{ns}/benchmarks"
    await api.create(benchmarks, {
        "apiVersion": "dagperf.io/v1alpha1", "kind": "Benchmark",
        "metadata": {"name": name, "namespace": ns}, "spec": body | spec,
    })  # fmt: skip
    return f"{benchmarks}/{name}"


def finished(benchmark: dict | None) -> bool:
    return ((benchmark or {}).get("status") or {}).get("phase") in ("Succeeded", "Failed")


async def results(api, ns: str, name: str) -> list[dict]:
    """The records the run wrote on the claim the operator made for it."""
    directory = await claim_directory(api, ns, Names(name).claim)
    return read_jsonl(directory / name / "profile_export.jsonl")


async def test_a_worker_over_its_memory_limit_is_oom_killed_restarted_and_its_requests_lost(
    node, shared_operator
):
    """The kernel's OOM killer, in the worker's memory cgroup, ends the worker that reads a
    reply bigger than its limit: the kubelet restarts it (OOMKilled, 137), the scheduler records
    what it held as WorkerLost, and the run ends Succeeded on what the workers measured."""
    ns, name = "oom", "oom"
    dataset = [*sessions("BOMB"), *sessions(*(f"q{i}" for i in range(12)))]
    dataset[0]["session_id"] = "bomb"
    limits = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "200Mi"}}
    async with node.admin() as api, Endpoint().serving() as url:
        await namespace(api, ns)
        await shared_operator.start(api)
        seen: list[dict] = []  # every state of every pod in the namespace, as watched
        watching = asyncio.create_task(watch(api, f"/api/v1/namespaces/{ns}/pods", seen))
        try:
            path = await launch(
                api, ns, name, url, dataset,
                load={"concurrency": 2}, workers={"replicas": 2, "resources": limits},
            )  # fmt: skip
            done = await eventually(lambda: api.get(path), finished, timeout=300)
        finally:
            watching.cancel()
        records = await results(api, ns, name)
    lost = [r for r in records if (r["error"] or {}).get("type") == "WorkerLost"]
    # The worker that read the reply was killed by the kernel in its cgroup, and restarted.
    (victim,) = {
        p["metadata"]["name"]
        for p in seen
        for c in p["status"].get("containerStatuses") or []
        if (c["lastState"].get("terminated") or {}).get("reason") == "OOMKilled"
    }
    (restarted,) = [p for p in seen if p["metadata"]["name"] == victim][-1]["status"][
        "containerStatuses"
    ]
    assert restarted["lastState"]["terminated"]["exitCode"] == 137
    assert restarted["restartCount"] >= 1
    # What it held is lost, not failed by the endpoint; every other request was measured.
    assert [r["metadata"]["conversation_id"] for r in lost] == ["bomb"]
    assert all(victim in r["error"]["message"] for r in lost), lost
    assert len([r for r in records if not r["error"]]) == 12
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["progress"]["errors"] == 0
    assert done["status"]["progress"]["cut"] == 1


@contextlib.asynccontextmanager
async def held_run(node, operator, key: str, requests: int, concurrency: int):
    """A Benchmark `key` in namespace `key` (the session's shared operator) of `requests`
    one-turn sessions, once its first `concurrency` requests wait at the endpoint: the API,
    the endpoint (its gate closed) and the Benchmark's path."""
    endpoint = Endpoint()
    endpoint.gate.clear()
    async with node.admin() as api, endpoint.serving() as url:
        await namespace(api, key)
        await operator.start(api)
        questions = sessions(*(f"q{i}" for i in range(requests)))
        path = await launch(api, key, key, url, questions, load={"concurrency": concurrency})
        await eventually(
            lambda: asyncio.sleep(0, len(endpoint.held)), lambda n: n == concurrency, timeout=120
        )
        yield api, endpoint, path


async def pods_of(api, ns: str, prefix: str) -> list[dict]:
    return [
        p for p in await api.items(PODS.format(ns=ns)) if p["metadata"]["name"].startswith(prefix)
    ]


async def test_a_worker_pod_deleted_mid_run_is_replaced_and_its_requests_cut(node, shared_operator):
    """A worker pod deleted while its requests wait at the endpoint: its Deployment replaces
    it, its requests are cut (cancelled by the worker, or lost to the scheduler), and the run
    ends on the rest."""
    name = "delete"
    run = held_run(node, shared_operator, name, requests=9, concurrency=4)
    async with run as (api, endpoint, path):
        workers = await pods_of(api, name, f"{name}-workers-")
        # One whose requests wait (the routing decides which does)
        victim = next(p for p in workers if p["status"]["podIP"] in endpoint.held)
        victim = victim["metadata"]["name"]
        await api.delete(PODS.format(ns=name) + f"/{victim}")
        await eventually(
            lambda: pods_of(api, name, f"{name}-workers-"),
            lambda pods: victim not in {p["metadata"]["name"] for p in pods} and len(pods) == 2,
            timeout=120,
        )
        endpoint.gate.set()
        done = await eventually(lambda: api.get(path), finished, timeout=300)
        records = await results(api, name, name)
    # The deleted worker, told to stop (SIGTERM), cancels what it sends; what the scheduler
    # still counted on it is lost once its heartbeats stop. Both are cut, not endpoint errors.
    # Which of the two each request meets is a race on a busy node.
    cut = [r for r in records if r["error"]]
    assert cut, records
    for r in cut:
        assert r["error"]["type"] in ("WorkerLost", "RequestCancellationError"), r
        assert victim in r["error"]["message"] or r["metadata"]["worker_id"].startswith(victim), r
    assert done["status"]["progress"]["errors"] == 0
    assert done["status"]["progress"]["cut"] == len(cut)
    if len(cut) < len(records):
        assert done["status"]["phase"] == "Succeeded", done["status"]


async def test_a_scheduler_killed_mid_run_fails_the_benchmark_with_its_exit_code(
    node, shared_operator
):
    """The scheduler's process SIGKILLed on the node while requests wait at the endpoint: the
    Benchmark fails, its message names the exit code, and its workers are scaled to zero."""
    name = "kill"
    async with held_run(node, shared_operator, name, requests=6, concurrency=3) as (api, _, path):
        (scheduler,) = await pods_of(api, name, f"{name}-scheduler-")
        kill(node, scheduler)
        failed = await eventually(lambda: api.get(path), finished, timeout=120)
        assert failed["status"]["phase"] == "Failed", failed["status"]
        assert "137" in failed["status"]["message"], failed["status"]
        workers = f"/apis/apps/v1/namespaces/{name}/deployments/{name}-workers"
        assert (await api.get(workers))["spec"]["replicas"] == 0


@pytest.mark.last  # the session's node goes
def test_down_leaves_no_process_mount_network_rule_or_cgroup(node, machine):
    parts = ("kubelet", "containerd", "kube-proxy", "coredns", "kube-scheduler", "local-path")
    pids = {c: int((node.directory / f"{c}.pid").read_text()) for c in parts}
    node.down()
    assert not [c for c, pid in pids.items() if alive(pid)]
    directory = str(node.directory)
    left = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if directory in (proc / "cmdline").read_bytes().decode(errors="replace"):
                left.append(proc.name)
        except OSError:
            continue
    assert left == []
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    assert [m for m in mounts if directory in m] == []
    now = Machine.now()
    assert now.netns == machine.netns
    assert BRIDGE not in now.links
    assert set(now.links) <= set(machine.links)  # the pods' veths too
    assert now.iptables == machine.iptables
    assert not list(Path("/sys/fs/cgroup").glob("*/kubepods"))
    assert now.host_dirs == machine.host_dirs
