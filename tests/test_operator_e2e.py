"""A Benchmark from creation to its end, with every part real except the cluster's own.

The operator (kopf, against the API emulator) validates the dataset and creates the scheduler
Job, its Service and the worker Deployment; the suite's Kubelet runs those containers' commands
as local processes, with their env and mounts, against the simulator; the operator follows the
run through the scheduler's /status and ends it from the pod's termination message. A Gate at
the simulator holds requests, so the test sees the run Running, and stops it there, on purpose
rather than by timing.

The fast lane, which runs without root: the same Benchmarks, and a synthetic session config and
a search, run on the real node in tests/test_cluster_operator.py and test_cluster_workloads.py.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dagperf.simulator import SimConfig

from emulator import ROOT, operating
from kubelet import Kubelet
from runs import file_server, free_port, gated_simulator, read_jsonl

NS = "bench"
DATASET = ROOT / "examples" / "dag_jsonl" / "three-roots.dag.jsonl"  # names no model
KEY = "sk-e2e-secret"
SIM = SimConfig(api_key=KEY, ttft_ms=5, itl_ms=1, output_tokens=8)


@pytest.fixture
async def node(tmp_path, monkeypatch):
    """(api, kubelet, simulator, gate): the operator and a node running its pods, a gated
    simulator as the endpoint, and the dataset and API key Secret in place."""
    metrics_port = free_port()
    settings = {
        "DAGPERF_ZMQ_PORT": str(free_port()),
        "DAGPERF_METRICS_PORT": str(metrics_port),
        "DAGPERF_STATUS_URL": f"http://127.0.0.1:{metrics_port}",
        "DAGPERF_METRICS_LINGER_S": "0",
    }
    async with (
        operating(tmp_path, monkeypatch, **settings) as (_, api, _),
        Kubelet(api, NS, tmp_path / "node") as kubelet,
        gated_simulator(SIM) as (sim, gate),
    ):
        await api.create(f"/api/v1/namespaces/{NS}/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dataset"},
            "data": {DATASET.name: DATASET.read_text()},
        })  # fmt: skip
        await api.create(f"/api/v1/namespaces/{NS}/secrets", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "endpoint"},
            "data": {"api-key": base64.b64encode(KEY.encode()).decode()},
        })  # fmt: skip
        try:
            yield api, kubelet, sim, gate
        finally:
            print(kubelet.output())  # shown when the test failed


async def start(api, sim, **spec) -> None:
    body = {
        "endpoint": {"url": sim.url, "apiKeySecretRef": {"name": "endpoint"}},
        "dataset": {"configMapRef": {"name": "dataset"}},
        "workers": {"replicas": 2},
        "results": {"persistentVolumeClaim": {"claimName": "bench-results"}},
    }
    await api.create(f"/apis/dagperf.io/v1alpha1/namespaces/{NS}/benchmarks", {
        "apiVersion": "dagperf.io/v1alpha1", "kind": "Benchmark",
        "metadata": {"name": "demo", "namespace": NS}, "spec": body | spec,
    })  # fmt: skip


def phase(name: str):
    return lambda b: b.get("status", {}).get("phase") == name


def condition(benchmark: dict, kind: str) -> dict:
    return next(c for c in benchmark["status"]["conditions"] if c["type"] == kind)


async def test_a_benchmark_runs_to_success_with_its_summary_and_exports(node):
    api, kubelet, sim, gate = node
    await start(api, sim, load={"concurrency": 3})
    running = await api.until(NS, "demo", phase("Running"), timeout=60)
    await gate.holding(3)  # the three roots are in flight
    assert running["status"]["workers"] == {"desired": 2, "registered": 2}
    gate.open()
    done = await api.until(NS, "demo", phase("Succeeded"), timeout=60)

    status = done["status"]
    assert status["progress"] == {
        "requestsCompleted": 9,
        "requestsTotal": 9,
        "errors": 0,
        "cut": 0,
        "display": "9/9",
    }  # every request carried the key: the simulator refuses any without it
    summary = status["summary"]
    assert summary["requestThroughput"] > 0 and summary["errorRate"] == 0
    assert summary["ttftP50Ms"] >= SIM.ttft_ms and summary["itlP50Ms"] > 0
    assert status["branchStats"]["children_completed"] == 6
    assert condition(done, "Completed")["status"] == "True"
    assert condition(done, "WorkersReady")["status"] == "True"
    assert status["resultsPath"] == "bench-results:/results/demo"

    results = kubelet.claim("bench-results") / "demo"
    records = read_jsonl(results / "profile_export.jsonl")
    assert len(records) == 9 and not any(r["error"] for r in records)
    worker_pods = [p for p in kubelet.started if p.startswith("demo-workers-")]
    assert len(worker_pods) == 2  # worker identities come from their pods' names:
    assert all(any(r["metadata"]["worker_id"].startswith(p) for p in worker_pods) for r in records)
    exported = json.loads((results / "profile_export_aiperf.json").read_text())
    assert exported["request_count"]["avg"] == 9
    assert (results / "profile_export_aiperf.csv").exists()
    assert KEY not in (results / "profile_export_aiperf.json").read_text()
    report = (results / "report.html").read_text()  # spec.results.report's default
    assert "<title>dagperf report: demo</title>" in report and KEY not in report

    scheduler = await pod("demo-scheduler-", api)
    (container,) = scheduler["status"]["containerStatuses"]
    final = json.loads(container["state"]["terminated"]["message"])
    assert final["outcome"] == "succeeded" and final["progress"]["requestsCompleted"] == 9
    deployment = await api.get(f"/apis/apps/v1/namespaces/{NS}/deployments/demo-workers")
    assert deployment["spec"]["replicas"] == 0


async def test_suspending_a_running_benchmark_keeps_what_it_measured(node):
    api, kubelet, sim, gate = node
    await start(api, sim, load={"concurrency": 2, "requestCount": 1000})
    await api.until(NS, "demo", phase("Running"), timeout=60)
    await gate.holding(2)
    await api.patch(
        f"/apis/dagperf.io/v1alpha1/namespaces/{NS}/benchmarks/demo", {"spec": {"suspend": True}}
    )
    # The operator asked the scheduler to stop; only then may the held requests finish.
    await api.until(NS, "demo", lambda b: b["status"].get("message", "").startswith("suspending"))
    gate.open()
    done = await api.until(NS, "demo", phase("Suspended"), timeout=60)

    status = done["status"]
    assert status["progress"]["requestsCompleted"] == 2 and status["progress"]["errors"] == 0
    assert status["progress"]["requestsTotal"] == 1000
    assert condition(done, "Completed")["reason"] == "Suspended"
    records = read_jsonl(kubelet.claim("bench-results") / "demo" / "profile_export.jsonl")
    assert len(records) == 2 and not any(r["error"] for r in records)
    deployment = await api.get(f"/apis/apps/v1/namespaces/{NS}/deployments/demo-workers")
    assert deployment["spec"]["replicas"] == 0


async def pod_names(api) -> list[str]:
    found = await api.get(f"/api/v1/namespaces/{NS}/pods")
    return [p["metadata"]["name"] for p in found["items"]]


async def pod(prefix: str, api) -> dict:
    (name,) = [n for n in await pod_names(api) if n.startswith(prefix)]
    return await api.get(f"/api/v1/namespaces/{NS}/pods/{name}")


async def test_a_dataset_too_large_for_a_config_map_runs_from_a_claim(node):
    """spec.dataset.persistentVolumeClaim: mounted read-only by the scheduler."""
    api, kubelet, sim, gate = node
    gate.open()
    (kubelet.claim("datasets") / "big").mkdir(parents=True)
    (kubelet.claim("datasets") / "big" / "three.dag.jsonl").write_bytes(DATASET.read_bytes())
    await api.create(f"/api/v1/namespaces/{NS}/persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "datasets"},
        "spec": {"accessModes": ["ReadOnlyMany"], "resources": {"requests": {"storage": "1Gi"}}},
    })  # fmt: skip
    claim = {"persistentVolumeClaim": {"claimName": "datasets", "path": "big/three.dag.jsonl"}}
    await start(api, sim, dataset=claim, load={"concurrency": 3})
    done = await api.until(NS, "demo", phase("Succeeded"), timeout=60)
    assert done["status"]["progress"]["display"] == "9/9"
    valid = "persistentvolumeclaim/datasets path big/three.dag.jsonl (checked by the scheduler)"
    assert condition(done, "DatasetValid")["message"] == valid


async def test_a_dataset_too_large_for_a_config_map_runs_from_a_url(node, tmp_path):
    """spec.dataset.url: its sha256 checked by the operator's preflight; then the scheduler
    pod's init container fetches it into an emptyDir and checks it again, and the scheduler
    reads that file. The URL's query (a presigned URL's signature) reaches only the init
    container's environment."""
    api, kubelet, sim, gate = node
    gate.open()
    served = tmp_path / "served"
    served.mkdir()
    (served / "three.dag.jsonl").write_bytes(DATASET.read_bytes())
    digest = hashlib.sha256(DATASET.read_bytes()).hexdigest()
    with file_server(served) as base:
        url = {"url": {"url": f"{base}/three.dag.jsonl?sig=s3cr3t", "sha256": digest}}
        await start(api, sim, dataset=url, load={"concurrency": 3})
        done = await api.until(NS, "demo", phase("Succeeded"), timeout=60)
        assert done["status"]["progress"]["display"] == "9/9"
        expected = f"url {base}/three.dag.jsonl (sha256 checked)"
        assert condition(done, "DatasetValid")["message"] == expected

    scheduler = await pod("demo-scheduler-", api)
    (fetched,) = scheduler["status"]["initContainerStatuses"]
    assert fetched["state"]["terminated"]["exitCode"] == 0
    (init,) = scheduler["spec"]["initContainers"]
    (container,) = scheduler["spec"]["containers"]
    assert container["command"][2:4] == ["--input-file", "/dataset/three.dag.jsonl"]
    assert "s3cr3t" not in json.dumps([init["command"], container])
    copy = kubelet.root / "pods" / scheduler["metadata"]["name"] / "volumes" / "dataset"
    assert [f.name for f in copy.iterdir()] == ["three.dag.jsonl"]  # no temporary left
    assert (copy / "three.dag.jsonl").read_bytes() == DATASET.read_bytes()
    assert "s3cr3t" not in (copy.parent.parent / f"{init['name']}.log").read_text()


CHANGING_SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

first, later = open(sys.argv[2], "rb").read(), open(sys.argv[3], "rb").read()
answers = iter([first])

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = next(answers, later)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

server = HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
print("serving", flush=True)
server.serve_forever()
"""


@contextlib.contextmanager
def changing_file_server(first: Path, later: Path) -> Iterator[str]:
    """A server on loopback whose first answer is `first` and every later one `later`: the
    file changed between the operator's preflight and the pod's fetch."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", CHANGING_SERVER, str(port), str(first), str(later)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline() == "serving\n"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=60)


async def test_a_url_dataset_changed_after_the_preflight_fails_in_the_init_container(
    node, tmp_path
):
    """The file the pod fetches is not the one the operator checked: the init container
    refuses it, the scheduler never starts, and the Benchmark fails saying both digests."""
    api, _, sim, _ = node
    checked, changed = tmp_path / "checked", tmp_path / "changed"
    checked.write_bytes(DATASET.read_bytes())
    changed.write_bytes(DATASET.read_bytes() + b"\n")
    digest = hashlib.sha256(checked.read_bytes()).hexdigest()
    with changing_file_server(checked, changed) as base:
        url = f"{base}/three.dag.jsonl"
        await start(api, sim, dataset={"url": {"url": f"{url}?sig=s3cr3t", "sha256": digest}})
        failed = await api.until(NS, "demo", phase("Failed"), timeout=60)
    got = hashlib.sha256(changed.read_bytes()).hexdigest()
    assert condition(failed, "Completed")["reason"] == "InitContainerFailed"
    assert failed["status"]["message"] == (
        "init container fetch-dataset exited with code 1: "
        f"dagperf fetch: {url}: sha256 is {got}, expected {digest}"
    )
    scheduler = await pod("demo-scheduler-", api)
    assert "terminated" not in scheduler["status"]["containerStatuses"][0]["state"]


@pytest.mark.parametrize(
    ("dataset", "reason", "said"),
    [
        ({"url": {"url": "{base}/three.dag.jsonl", "sha256": "0" * 64}}, "FetchFailed",
         "{base}/three.dag.jsonl: sha256 is {digest}, expected " + "0" * 64),
        ({"url": {"url": "{base}/missing.jsonl", "sha256": "0" * 64}}, "FetchFailed",
         "{base}/missing.jsonl: the server answered HTTP 404 File not found"),
    ],
)  # fmt: skip
async def test_a_url_dataset_that_cannot_be_run_fails_before_any_pod(node, tmp_path, dataset,
                                                                     reason, said):  # fmt: skip
    api, _, sim, _ = node
    (tmp_path / "three.dag.jsonl").write_bytes(DATASET.read_bytes())
    digest = hashlib.sha256(DATASET.read_bytes()).hexdigest()
    with file_server(tmp_path) as base:
        dataset["url"]["url"] = dataset["url"]["url"].format(base=base)
        await start(api, sim, dataset=dataset)
        failed = await api.until(NS, "demo", phase("Failed"), timeout=30)
    assert condition(failed, "DatasetValid")["reason"] == reason
    assert failed["status"]["message"] == said.format(base=base, digest=digest)
    assert not await pod_names(api)


async def test_a_claim_dataset_the_scheduler_cannot_run_fails_with_its_problems(node):
    api, kubelet, sim, _ = node
    kubelet.claim("datasets").mkdir(parents=True)
    (kubelet.claim("datasets") / "bad.dag.jsonl").write_text('{"session_id": "a"}\n')
    await api.create(f"/api/v1/namespaces/{NS}/persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "datasets"},
        "spec": {"accessModes": ["ReadOnlyMany"], "resources": {"requests": {"storage": "1Gi"}}},
    })  # fmt: skip
    claim = {"persistentVolumeClaim": {"claimName": "datasets", "path": "bad.dag.jsonl"}}
    await start(api, sim, dataset=claim)
    failed = await api.until(NS, "demo", phase("Failed"), timeout=60)
    message = failed["status"]["message"]
    assert message.startswith("the scheduler exited with code 2: ")  # the node maps /dataset
    assert "bad.dag.jsonl:1: " in message and message.endswith("invalid dag_jsonl, 1 problem(s)")
