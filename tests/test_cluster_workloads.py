"""What a Benchmark runs, on the real node (the `cluster` fixture: the chart by helm, its operator
as the chart's pod, every pod placed by kube-scheduler and run on containerd): its dataset from
a ConfigMap, a claim or a URL, checked before any pod starts; a synthetic session config; and a
search for the most load that meets an objective."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from control_plane import ROOT
from operated_cluster import DATASET, KEY, condition, failed_job, phase
from real_node import NODE_IP, phase_is, pod, restricted
from runs import eventually, read_jsonl, serving, spawn

pytestmark = pytest.mark.cluster

CLI_REFUSAL = "--fixed-schedule needs a start time for every session (trace timestamps)"


async def test_dataset_errors_are_reported_before_any_pod_starts(cluster):
    await cluster.api.create(f"/api/v1/namespaces/{cluster.ns}/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "broken"},
        "data": {"d.jsonl": '{"session_id": "root", "turns": []}\n{oops\n'},
    })  # fmt: skip
    await cluster.start("bad", dataset={"configMapRef": {"name": "broken"}})
    await cluster.start("missing", dataset={"configMapRef": {"name": "nowhere"}})
    await cluster.start("untimed", load={"fixedSchedule": True})  # a dataset without times
    bad = await cluster.until("bad", phase("Failed"))
    missing = await cluster.until("missing", phase("Failed"))
    untimed = await cluster.until("untimed", phase("Failed"))

    valid = condition(bad, "DatasetValid")
    assert (valid["status"], valid["reason"]) == ("False", "InvalidDataset")
    assert "line 2: invalid JSON" in valid["message"]
    valid = condition(missing, "DatasetValid")
    assert (valid["status"], valid["reason"]) == ("False", "ConfigMapNotFound")
    valid = condition(untimed, "DatasetValid")  # `dagperf profile --fixed-schedule`'s words
    assert (valid["status"], valid["reason"]) == ("False", "InvalidLoad")
    assert valid["message"] == f"load: {CLI_REFUSAL}"
    for name in ("bad", "missing", "untimed"):
        assert await cluster.owned(name) == {}
    assert await cluster.pods("") == []
    # The operator may create Events (its RBAC), so a user sees why in `kubectl describe`.
    events = await eventually(
        lambda: cluster.api.items(f"/api/v1/namespaces/{cluster.ns}/events"),
        lambda found: {"InvalidDataset", "ConfigMapNotFound"} <= {e["reason"] for e in found},
    )
    by_reason = {e["reason"]: e for e in events}
    assert by_reason["InvalidDataset"]["type"] == "Warning"
    assert by_reason["InvalidDataset"]["involvedObject"]["name"] == "bad"


@pytest.mark.parametrize("cluster", ["listed"], indirect=True)
async def test_a_missing_dataset_claim_is_named_before_any_pod_starts(cluster):
    """The chart's per-namespace Role lets the operator see whether a dataset's claim exists
    (a run from a claim is in tests/test_operator_e2e.py)."""
    claim = {"persistentVolumeClaim": {"claimName": "nowhere", "path": "d.jsonl"}}
    await cluster.start("lost", dataset=claim)
    lost = await cluster.until("lost", phase("Failed"))
    assert condition(lost, "DatasetValid")["reason"] == "ClaimNotFound"
    message = "persistentvolumeclaim/nowhere does not exist in this namespace"
    assert lost["status"]["message"] == message
    assert await cluster.owned("lost") == {} and await cluster.pods("") == []


async def test_a_url_dataset_is_fetched_by_an_admitted_init_container(cluster):
    """The scheduler pod's init container passes the namespace's restricted pod security
    admission, fetches the file into the emptyDir the scheduler reads; a file changed after
    the operator checked it fails in the init container, and the Job controller fails the Job."""
    cluster.gate.open()
    checked = DATASET.read_bytes()
    changing = iter([checked])  # the preflight's answer; the pod's gets the changed file

    async def serve(request: web.Request) -> web.Response:
        if request.path == "/changing.dag.jsonl":
            return web.Response(body=next(changing, checked + b"\n"))
        return web.Response(body=checked)

    app = web.Application()
    app.router.add_get("/{name}", serve)
    digest = hashlib.sha256(checked).hexdigest()
    async with serving(app, NODE_IP) as base:  # which the operator's and the pods' fetches reach
        ref = {"url": f"{base}/three.dag.jsonl?sig=s3cr3t", "sha256": digest, "sizeLimit": "1Gi"}
        await cluster.start("fromurl", dataset={"url": ref})
        done = await cluster.until("fromurl", phase("Succeeded"))
        ref = {"url": f"{base}/changing.dag.jsonl", "sha256": digest}
        await cluster.start("changed", dataset={"url": ref})
        changed = await cluster.until("changed", phase("Failed"))
    assert done["status"]["progress"]["display"] == "9/9"
    (scheduler,) = await cluster.pods("fromurl-scheduler-")
    (init,) = scheduler["spec"]["initContainers"]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    (fetched,) = scheduler["status"]["initContainerStatuses"]
    assert fetched["state"]["terminated"]["exitCode"] == 0
    (container,) = scheduler["spec"]["containers"]
    assert "/dataset/three.dag.jsonl" in container["command"]
    assert "s3cr3t" not in json.dumps([init["command"], container])

    got = hashlib.sha256(checked + b"\n").hexdigest()
    assert condition(changed, "Completed")["reason"] == "InitContainerFailed"
    assert changed["status"]["message"] == (
        "init container fetch-dataset exited with code 1: dagperf fetch: "
        f"{base}/changing.dag.jsonl: sha256 is {got}, expected {digest}"
    )
    job = f"/apis/batch/v1/namespaces/{cluster.ns}/jobs/changed-scheduler"
    await eventually(lambda: cluster.api.get(job), failed_job)


LOAD = """
import os, shutil
os.makedirs('/data/big')
shutil.copy('/source/three-roots.dag.jsonl', '/data/big/three.dag.jsonl')
"""


async def test_a_dataset_too_large_for_a_config_map_runs_from_a_claim(cluster):
    """spec.dataset.persistentVolumeClaim: a claim a pod of the user's filled, mounted
    read-only by the scheduler, which checks the file there."""
    cluster.gate.open()
    ns = cluster.ns
    await cluster.api.create(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "datasets"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    })  # fmt: skip
    mounts = [{"name": "data", "mountPath": "/data"}, {"name": "source", "mountPath": "/source"}]
    volumes = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}},
        {"name": "source", "configMap": {"name": "dataset"}},
    ]
    loader = restricted(
        {"name": "load", "command": ["python3", "-c", LOAD], "volumeMounts": mounts}
    )
    loading = pod("load", loader, restartPolicy="Never", volumes=volumes)
    await cluster.api.create(f"/api/v1/namespaces/{ns}/pods", loading)
    loaded = await eventually(
        lambda: cluster.api.get(f"/api/v1/namespaces/{ns}/pods/load"),
        phase_is("Succeeded", "Failed"),
        timeout=120,
    )
    assert loaded["status"]["phase"] == "Succeeded", loaded["status"]

    claim = {"persistentVolumeClaim": {"claimName": "datasets", "path": "big/three.dag.jsonl"}}
    await cluster.start(dataset=claim, load={"concurrency": 3})
    done = await cluster.until("demo", phase("Succeeded"))
    assert done["status"]["progress"]["display"] == "9/9"
    valid = "persistentvolumeclaim/datasets path big/three.dag.jsonl (checked by the scheduler)"
    assert condition(done, "DatasetValid")["message"] == valid
    (scheduler,) = await cluster.pods("demo-scheduler-")
    (mounted,) = [v for v in scheduler["spec"]["volumes"] if "persistentVolumeClaim" in v
                  and v["persistentVolumeClaim"]["claimName"] == "datasets"]  # fmt: skip
    assert mounted["persistentVolumeClaim"].get("readOnly") is True


SESSIONS = """
seed: 3
num_sessions: 4
session_graph:
  type: linear
  num_request_generator: {type: fixed, value: 3}
  inherit_history: true
prompt:
  input_length: {type: fixed, value: 32}
  output_length: {type: fixed, value: 4}
"""


async def test_a_synthetic_session_config_runs_from_a_config_map(cluster):
    """dataset.type session_config: the ConfigMap holds a session config, which the operator
    checks and the scheduler generates its sessions from (4 sessions of 3 turns)."""
    await cluster.api.create(f"/api/v1/namespaces/{cluster.ns}/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "sessions"},
        "data": {"sessions.yaml": SESSIONS},
    })  # fmt: skip
    cluster.gate.open()
    dataset = {"configMapRef": {"name": "sessions"}, "type": "session_config"}
    await cluster.start(dataset=dataset, load={"concurrency": 2})
    done = await cluster.until("demo", phase("Succeeded"))
    assert done["status"]["progress"]["display"] == "12/12"
    assert condition(done, "DatasetValid")["message"] == "configmap/sessions key sessions.yaml"
    records = read_jsonl(await cluster.claim("results") / "demo" / "profile_export.jsonl")
    assert len(records) == 12 and not any(r["error"] for r in records)
    turns = sorted(r["metadata"]["turn_index"] for r in records)
    assert turns == [0] * 4 + [1] * 4 + [2] * 4


@contextlib.asynccontextmanager
async def simulator_process(*flags: str) -> AsyncIterator[str]:
    """`dagperf simulate` on a free port of the node's address; yields its URL."""
    process = await spawn("simulate", "--host", NODE_IP, "--port", "0", *flags)
    try:
        assert process.stdout is not None
        banner = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        yield banner.split(" at ", 1)[1].strip()
    finally:
        process.terminate()
        await process.wait()


async def test_a_search_benchmark_finds_the_servers_slots_and_reports_them(cluster):
    """spec.search: one Job runs `dagperf search` with its workers as processes of its pod,
    against a server with 2 slots; the TTFT objective lies between one reply time and two, so
    the answer is known in advance (see tests/test_search.py)."""
    example = ROOT / "examples" / "search" / "single-turn.dag.jsonl"
    await cluster.api.create(f"/api/v1/namespaces/{cluster.ns}/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "single"},
        "data": {example.name: example.read_text()},
    })  # fmt: skip
    # 100 ms a reply, objective 150; the simulator in a process of its own, so that the test's
    # loop cannot delay its replies
    slots = ["--ttft-ms", "100", "--itl-ms", "0", "--output-tokens", "1", "--max-concurrency", "2"]
    async with simulator_process(*slots, "--api-key", KEY) as url:
        search = {"slo": ["time_to_first_token:p90:150"], "max": 4}
        endpoint = {"url": url, "apiKeySecretRef": {"name": "endpoint"}}
        await cluster.start(endpoint=endpoint, dataset={"configMapRef": {"name": "single"}},
                            search=search, workers={"processesPerPod": 1})  # fmt: skip
        done = await cluster.until("demo", phase("Succeeded"), timeout=300)
    assert done["status"]["search"] == {
        "parameter": "concurrency", "slo": ["time_to_first_token:p90:150"], "best": 2,
        "steps": [{"value": v, "meetsSlo": v <= 2, "verdict": "meets" if v <= 2 else "misses"}
                  for v in (1, 2, 4, 3)],
    }  # fmt: skip
    assert await cluster.pods("demo-workers-") == []
    results = await cluster.claim("results") / "demo"
    written = json.loads((results / "search_results.json").read_text())
    assert written["best"] == 2 and len(written["steps"]) == 4
    assert (results / "step02-concurrency-2" / "profile_export_aiperf.json").exists()
    assert "step01-concurrency-1 vs step02-concurrency-2" in (results / "report.html").read_text()
