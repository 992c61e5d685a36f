"""The operator with kopf really running, against a Kubernetes API emulator over HTTP.

No controller runs in the emulator: where a test needs the scheduler's pod to have ended, it
writes that pod itself, termination message included, as the kubelet would.
"""

from __future__ import annotations

import base64
import gzip
import json
import subprocess
import sys

import msgspec
import pytest
import yaml

from dagperf.vocabulary.contract import FinalReport, MetricsSummary, Progress, RunState
from dagperf.vocabulary.keys import FILES, SCHEDULER_FILES, WORKER_FILES
from dagperf_operator.settings import OperatorSettings

from dagfile import conv, encode, turn
from emulator import ROOT, Api, operating
from runs import eventually, free_port

NS = "bench"
DATASET = b"".join(encode(conv("root", turn(forks=["a"])), conv("a")))
BENCH = "/apis/dagperf.io/v1alpha1/namespaces/bench/benchmarks"
JOBS = "/apis/batch/v1/namespaces/bench/jobs"
DEPLOYMENTS = "/apis/apps/v1/namespaces/bench/deployments"
CORE = "/api/v1/namespaces/bench"


@pytest.fixture
async def kube(tmp_path, monkeypatch):
    # No scheduler answers in these tests: its /status address refuses at once.
    status_url = f"http://127.0.0.1:{free_port()}"
    (tmp_path / "control.key").write_bytes(CONTROL_KEY)
    async with operating(
        tmp_path, monkeypatch, DAGPERF_STATUS_URL=status_url,
        DAGPERF_CONTROL_KEY_FILE=str(tmp_path / "control.key"),
    ) as operated:  # fmt: skip
        yield operated


CONTROL_KEY = b"a control key only these tests know"


def benchmark(name: str = "demo", **spec) -> dict:
    return {
        "apiVersion": "dagperf.io/v1alpha1",
        "kind": "Benchmark",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "endpoint": {"url": "http://vllm:8000", "model": "m"},
            "dataset": {"configMapRef": {"name": "data"}},
        }
        | spec,
    }


def config_map(content: bytes = DATASET, name: str = "data", key: str = "dataset.jsonl") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS},
        "data": {key: content.decode()},
    }


async def warned(cluster, reason: str) -> None:
    """Wait for the operator's Warning Event with this reason (kopf posts them in the
    background)."""
    await eventually(
        cluster.events,
        lambda events: any((e.get("type"), e.get("reason")) == ("Warning", reason) for e in events),
    )


def phase(name: str):
    return lambda b: b.get("status", {}).get("phase") == name


def condition(b: dict, kind: str) -> dict:
    return next(c for c in b["status"]["conditions"] if c["type"] == kind)


async def created(api: Api, name: str = "demo", **spec) -> dict:
    await api.create(f"{CORE}/configmaps", config_map())
    await api.create(BENCH, benchmark(name, **spec))
    return await api.until(NS, name, phase("Pending"))


async def scheduler_ended(
    api: Api, name: str, exit_code: int, message: str, reason: str = "Completed"
) -> None:
    """Play the kubelet: the scheduler's pod has ended, with this termination message."""
    job = await api.get(f"{JOBS}/{name}-scheduler")
    await api.create(f"{CORE}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-scheduler-x1", "namespace": NS,
                     "labels": job["spec"]["template"]["metadata"]["labels"]},
        "status": {"phase": "Succeeded" if exit_code == 0 else "Failed", "containerStatuses": [{
            "name": "scheduler",
            "state": {"terminated": {"exitCode": exit_code, "reason": reason, "message": message}},
        }]},
    })  # fmt: skip


FINAL = msgspec.to_builtins(FinalReport(
    outcome=RunState.SUCCEEDED, reason=None, benchmark="demo",
    progress=Progress(requests_sent=5, requests_completed=5, requests_total=5),
    summary=MetricsSummary(request_throughput=12.5, ttft_p50_ms=20.1, ttft_p99_ms=25.3,
                           itl_p50_ms=5.0, itl_p99_ms=5.2, error_rate=0.0),
    branch_stats={"children_spawned": 2, "children_completed": 2},
    results_path="/results/demo",
))  # fmt: skip


async def test_a_valid_benchmark_launches_owned_secure_pods(kube):
    _, api, _ = kube
    await api.create(
        f"{CORE}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "key", "namespace": NS},
            "data": {"api-key": base64.b64encode(b"sk-secret").decode()},
        },
    )
    spec = {
        "endpoint": {"url": "http://vllm:8000", "model": "m", "apiKeySecretRef": {"name": "key"}},
        "workers": {"replicas": 3, "processesPerPod": 2},
        "load": {"concurrency": 8, "requestCount": 100},
        "results": {"persistentVolumeClaim": {"size": "1Gi", "storageClassName": "fast"}},
    }
    b = await created(api, **spec)
    uid = b["metadata"]["uid"]
    job = await api.get(f"{JOBS}/demo-scheduler")
    deployment = await api.get(f"{DEPLOYMENTS}/demo-workers")
    service = await api.get(f"{CORE}/services/demo-scheduler")
    claim = await api.get(f"{CORE}/persistentvolumeclaims/demo-results")
    keys = await api.get(f"{CORE}/secrets/demo-keys")
    policy = await api.get(f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/demo-keys")
    for obj, component in (
        (job, "scheduler"),
        (deployment, "worker"),
        (service, "scheduler"),
        (claim, "results"),
        (keys, "keys"),
        (policy, "scheduler"),
    ):
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            "Benchmark",
            "demo",
            uid,
            True,
        )
        assert obj["metadata"]["labels"]["app.kubernetes.io/name"] == "dagperf"
        assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == "demo"
        assert obj["metadata"]["labels"]["app.kubernetes.io/component"] == component

    assert job["spec"]["backoffLimit"] == 0
    for pod in (job["spec"]["template"]["spec"], deployment["spec"]["template"]["spec"]):
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["automountServiceAccountToken"] is False
        (container,) = pod["containers"]
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert container["resources"]["requests"]["cpu"]
        assert {"name": "scratch", "mountPath": "/tmp"} in container["volumeMounts"]
        assert "sk-secret" not in json.dumps(pod)

    (scheduler,) = job["spec"]["template"]["spec"]["containers"]
    mounts = {m["name"]: m for m in scheduler["volumeMounts"]}
    assert mounts["dataset"] == {"name": "dataset", "mountPath": "/dataset", "readOnly": True}
    assert mounts["results"]["mountPath"] == "/results"
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert volumes["dataset"]["configMap"]["name"] == "data"
    assert volumes["results"]["persistentVolumeClaim"]["claimName"] == "demo-results"
    command = scheduler["command"]
    assert command[:2] == ["dagperf", "scheduler"]
    assert command[command.index("--input-file") + 1] == "/dataset/dataset.jsonl"
    assert command[command.index("--workers-expected") + 1] == "6"
    assert command[command.index("--request-count") + 1] == "100"
    assert command[command.index("--summary-file") + 1] == scheduler["terminationMessagePath"]
    assert "OPENAI_API_KEY" not in json.dumps(scheduler)  # the model is named: no need to list

    (worker,) = deployment["spec"]["template"]["spec"]["containers"]
    assert deployment["spec"]["replicas"] == 3
    env = {e["name"]: e for e in worker["env"]}
    assert env["OPENAI_API_KEY"] == {
        "name": "OPENAI_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "key", "key": "api-key"}},
    }
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert worker["command"][worker["command"].index("--scheduler") + 1] == (
        "tcp://demo-scheduler.bench.svc:5555"
    )
    assert worker["command"][worker["command"].index("--worker-id") + 1] == "$(POD_NAME)"
    assert claim["spec"]["storageClassName"] == "fast"
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "zmq": 5555,
        "metrics": 9090,
    }
    # routed before the scheduler's readiness probe passes: its workers connect as it listens
    assert service["spec"]["publishNotReadyAddresses"] is True

    # The run's keys: each pod mounts its own half, the wire's secrets never in a command line.
    files = {k: base64.b64decode(v).decode() for k, v in keys["data"].items()}
    assert set(files) == set(FILES)
    # derived from the operator's key: it can stop the run after a restart, reading no Secret
    assert files["control.token"] == OperatorSettings(control_key=CONTROL_KEY).control_token(uid)
    await api.create(BENCH, benchmark("other", **spec))
    other = await api.until(NS, "other", phase("Pending"))
    assert other["metadata"]["uid"] != uid
    other_keys = await api.get(f"{CORE}/secrets/other-keys")
    assert other_keys["data"]["control.token"] != keys["data"]["control.token"]
    assert other_keys["data"]["worker.secret"] != keys["data"]["worker.secret"]
    for pod, container, half in (
        (job, scheduler, SCHEDULER_FILES),
        (deployment, worker, WORKER_FILES),
    ):
        spec = pod["spec"]["template"]["spec"]
        (volume,) = [v for v in spec["volumes"] if v["name"] == "keys"]
        assert volume["secret"]["secretName"] == "demo-keys"
        assert [i["key"] for i in volume["secret"]["items"]] == list(half)
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "keys"]
        assert mount["readOnly"] is True
        command = container["command"]
        assert command[command.index("--keys") + 1] == mount["mountPath"]
        assert not any(secret in json.dumps(pod) for secret in files.values())
    assert worker["command"][worker["command"].index("--url") + 1] == "http://vllm:8000"
    # Only this Benchmark's workers reach its scheduler's ZeroMQ port; metrics stay open.
    workers_only, metrics = policy["spec"]["ingress"]
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert selected["app.kubernetes.io/instance"] == "demo"
    (source,) = workers_only["from"]
    assert source["podSelector"]["matchLabels"].items() <= (
        deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    assert workers_only["ports"] == [{"protocol": "TCP", "port": 5555}]
    assert metrics == {"ports": [{"protocol": "TCP", "port": 9090}]}

    status = b["status"]
    assert status["workers"] == {"desired": 6, "registered": 0}
    assert status["observedGeneration"] == 1 and status["startTime"]
    assert status["resultsPath"] == "demo-results:/results/demo"
    assert [c["type"] for c in status["conditions"]] == [
        "DatasetValid",
        "ResourcesCreated",
        "WorkersReady",
    ]
    assert [c["status"] for c in status["conditions"]] == ["True", "True", "False"]


async def test_an_invalid_dataset_fails_with_the_loaders_errors_and_launches_nothing(kube):
    cluster, api, _ = kube
    bad = b"".join(encode(conv("root", turn(forks=["ghost"])), "{oops"))
    await api.create(f"{CORE}/configmaps", config_map(bad))
    await api.create(BENCH, benchmark())
    b = await api.until(NS, "demo", phase("Failed"))
    valid = condition(b, "DatasetValid")
    assert (valid["status"], valid["reason"]) == ("False", "InvalidDataset")
    assert valid["message"].startswith("line 1: session 'root' turn 0: branch target 'ghost'")
    assert "line 2: invalid JSON" in valid["message"]
    assert b["status"]["completionTime"]
    await warned(cluster, "InvalidDataset")
    assert await api.get(f"{JOBS}/demo-scheduler") is None
    assert await api.get(f"{DEPLOYMENTS}/demo-workers") is None
    assert await api.get(f"{CORE}/services/demo-scheduler") is None


async def test_an_invalid_session_config_fails_with_its_problems_and_launches_nothing(kube):
    _, api, _ = kube
    config = b"num_sessions: 0\nsession_graph: {type: linear}\nsurprise: 1\n"
    await api.create(f"{CORE}/configmaps", config_map(config, key="sessions.yaml"))
    dataset = {"configMapRef": {"name": "data"}, "type": "session_config"}
    await api.create(BENCH, benchmark(dataset=dataset))
    b = await api.until(NS, "demo", phase("Failed"))
    valid = condition(b, "DatasetValid")
    assert (valid["status"], valid["reason"]) == ("False", "InvalidDataset")
    assert "num_sessions: Input should be greater than or equal to 1" in valid["message"]
    assert "surprise: unknown field" in valid["message"]
    assert await api.get(f"{JOBS}/demo-scheduler") is None


def clis_refusal(dataset: bytes, *flags: str, directory) -> str:
    """What `dagperf profile` says when it refuses to run this dataset under these flags."""
    path = directory / "dataset.jsonl"
    path.write_bytes(dataset)
    command = [sys.executable, "-m", "dagperf", "profile", "--input-file", str(path), *flags]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=directory)
    assert done.returncode == 2, done.stderr
    return done.stderr.strip().splitlines()[-1].split(": error: ", 1)[1]


async def test_a_load_its_dataset_cannot_run_is_refused_before_launch_as_the_cli_refuses_it(
    kube, tmp_path
):
    """A fixed schedule on a dataset without timestamps: refused by the operator's preflight
    with the CLI's words, not by the scheduler after its pods start."""
    cluster, api, _ = kube
    await api.create(f"{CORE}/configmaps", config_map())
    await api.create(BENCH, benchmark(load={"fixedSchedule": True}))
    b = await api.until(NS, "demo", phase("Failed"))
    valid = condition(b, "DatasetValid")
    said = clis_refusal(DATASET, "--fixed-schedule", directory=tmp_path)
    assert said.startswith("--fixed-schedule needs a start time")
    assert (valid["status"], valid["reason"]) == ("False", "InvalidLoad")
    assert valid["message"] == f"load: {said}"
    await warned(cluster, "InvalidLoad")
    assert await api.get(f"{JOBS}/demo-scheduler") is None
    assert await api.get(f"{DEPLOYMENTS}/demo-workers") is None
    # The same load on a trace with timestamps runs.
    trace = b'{"timestamp": 0, "input_length": 10, "output_length": 2}\n'
    await api.create(f"{CORE}/configmaps", config_map(trace, name="trace", key="t.jsonl"))
    dataset = {"configMapRef": {"name": "trace"}, "type": "mooncake_trace"}
    await api.create(BENCH, benchmark("timed", dataset=dataset, load={"fixedSchedule": True}))
    b = await api.until(NS, "timed", phase("Pending"))
    assert condition(b, "DatasetValid")["status"] == "True"
    assert await api.get(f"{JOBS}/timed-scheduler") is not None


async def test_a_missing_config_map(kube):
    _, api, _ = kube
    await api.create(BENCH, benchmark())
    b = await api.until(NS, "demo", phase("Failed"))
    valid = condition(b, "DatasetValid")
    assert (valid["status"], valid["reason"]) == ("False", "ConfigMapNotFound")
    assert "configmap/data does not exist" in valid["message"]
    assert await api.get(f"{JOBS}/demo-scheduler") is None


async def test_a_gzip_dataset_in_binary_data(kube):
    _, api, _ = kube
    packed = config_map(name="data") | {
        "data": {},
        "binaryData": {"d.gz": base64.b64encode(gzip.compress(DATASET)).decode()},
    }
    await api.create(f"{CORE}/configmaps", packed)
    await api.create(BENCH, benchmark())
    b = await api.until(NS, "demo", phase("Pending"))
    assert condition(b, "DatasetValid")["message"] == "configmap/data key d.gz"


async def test_an_invalid_spec_fails(kube):
    _, api, _ = kube
    await api.create(f"{CORE}/configmaps", config_map())
    await api.create(BENCH, benchmark(load={"concurrency": 0}))
    b = await api.until(NS, "demo", phase("Failed"))
    accepted = condition(b, "SpecAccepted")
    assert accepted["reason"] == "InvalidSpec"
    assert accepted["message"].startswith("spec.load.concurrency: Input should be greater")


async def test_a_finished_run_succeeds_with_its_summary_and_scales_workers_down(kube):
    _, api, _ = kube
    await created(api)
    await scheduler_ended(api, "demo", 0, json.dumps(FINAL))
    b = await api.until(NS, "demo", phase("Succeeded"))
    status = b["status"]
    assert status["summary"] == FINAL["summary"]
    assert status["progress"] == {
        "requestsCompleted": 5,
        "requestsTotal": 5,
        "errors": 0,
        "cut": 0,
        "display": "5/5",
    }
    assert status["branchStats"]["children_spawned"] == 2
    assert condition(b, "Completed")["status"] == "True" and status["completionTime"]
    deployment = await api.get(f"{DEPLOYMENTS}/demo-workers")
    assert deployment["spec"]["replicas"] == 0


async def test_a_search_runs_as_one_job_and_its_answer_lands_in_the_status(kube):
    """No worker pods: the search's Job runs its workers itself; its final report's answer
    and steps become status.search (the `Best` column)."""
    _, api, _ = kube
    search = {"slo": ["time_to_first_token:p90:60"], "max": 16}
    await created(api, search=search)
    job = await api.get(f"{JOBS}/demo-scheduler")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"][:2] == ["dagperf", "search"]
    assert await api.get(f"{DEPLOYMENTS}/demo-workers") is None
    steps = [{"value": v, "meetsSlo": v <= 4} for v in (1, 2, 4, 8, 6, 5)]
    answer = {"parameter": "concurrency", "slo": search["slo"], "best": 4, "steps": steps}
    await scheduler_ended(api, "demo", 0, json.dumps(FINAL | {"search": answer}))
    b = await api.until(NS, "demo", phase("Succeeded"))
    assert b["status"]["search"] == answer


async def test_a_search_that_found_no_load_fails_with_the_reason(kube):
    _, api, _ = kube
    await created(api, search={"slo": ["time_to_first_token:p90:1"]})
    answer = {"parameter": "concurrency", "slo": ["time_to_first_token:p90:1"], "best": None,
              "steps": [{"value": 1, "meetsSlo": False}]}  # fmt: skip
    final = FINAL | {"outcome": "failed", "reason": "no load tried met every objective",
                     "search": answer}  # fmt: skip
    await scheduler_ended(api, "demo", 4, json.dumps(final))
    b = await api.until(NS, "demo", phase("Failed"))
    assert b["status"]["message"] == "the run failed: no load tried met every objective"
    assert "best" not in b["status"]["search"]  # none: a merge patch drops a null
    assert b["status"]["search"]["steps"] == answer["steps"]


def backend_pod(name: str, ip: str, phase: str = "Running") -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "vllm", "tier": "llm"}},
        "status": {"phase": phase, "podIP": ip},
    }  # fmt: skip


async def test_server_metrics_are_scraped_from_each_running_backend_pod_directly(kube):
    _, api, _ = kube
    for pod in (backend_pod("vllm-b", "10.0.0.8"), backend_pod("vllm-a", "10.0.0.7"),
                backend_pod("vllm-new", "10.0.0.9", phase="Pending")):  # fmt: skip
        await api.create(f"{CORE}/pods", pod)
    endpoint = {"url": "http://vllm:8000", "model": "m", "backendHeaders": ["x-pod"]}
    wanted = {"selector": {"app": "vllm"}, "port": 8000, "intervalSeconds": 2}
    await created(api, endpoint=endpoint, serverMetrics=wanted)
    job = await api.get(f"{JOBS}/demo-scheduler")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    urls = [command[i + 1] for i, flag in enumerate(command) if flag == "--server-metrics-url"]
    assert urls == ["http://10.0.0.7:8000/metrics", "http://10.0.0.8:8000/metrics"]
    assert float(command[command.index("--server-metrics-interval") + 1]) == 2
    assert command[command.index("--backend-header") + 1] == "x-pod"


async def test_server_metrics_selecting_no_running_pod_fail_before_launch(kube):
    _, api, _ = kube
    await api.create(f"{CORE}/configmaps", config_map())
    wanted = {"selector": {"app": "nothing-here"}, "port": 8000}
    await api.create(BENCH, benchmark(serverMetrics=wanted))
    b = await api.until(NS, "demo", phase("Failed"))
    accepted = condition(b, "SpecAccepted")
    assert (accepted["reason"], accepted["status"]) == ("NoBackendPods", "False")
    assert "no running pod in " + NS + " has the labels app=nothing-here" in accepted["message"]
    assert await api.get(f"{JOBS}/demo-scheduler") is None


@pytest.mark.parametrize(
    ("code", "reason", "message", "expected"),
    [
        (137, "OOMKilled", "", "the scheduler ran out of memory (OOMKilled)"),
        (
            1,
            "Error",
            json.dumps(FINAL | {"outcome": "failed", "reason": "every worker was lost"}),
            "the run failed: every worker was lost",
        ),
        (1, "Error", "Traceback ...", "the scheduler exited with code 1: Traceback ..."),
    ],
)
async def test_a_failed_scheduler_fails_the_benchmark_with_its_reason(
    kube, code, reason, message, expected
):
    _, api, _ = kube
    await created(api)
    await scheduler_ended(api, "demo", code, message, reason)
    b = await api.until(NS, "demo", phase("Failed"))
    assert b["status"]["message"].startswith(expected)
    completed = condition(b, "Completed")
    assert (completed["status"], completed["reason"]) == ("False", reason)
    assert (await api.get(f"{DEPLOYMENTS}/demo-workers"))["spec"]["replicas"] == 0


async def test_spec_edits_after_creation_are_refused_not_half_applied(kube):
    _, api, _ = kube
    await created(api, workers={"replicas": 1})
    await api.patch(f"{BENCH}/demo", {"spec": {"workers": {"replicas": 9}}})
    b = await api.until(
        NS,
        "demo",
        lambda b: any(c["type"] == "SpecAccepted" for c in b["status"].get("conditions", [])),
    )
    accepted = condition(b, "SpecAccepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "SpecImmutable")
    assert "spec.workers.replicas" in accepted["message"]
    assert (await api.get(f"{DEPLOYMENTS}/demo-workers"))["spec"]["replicas"] == 1
    assert b["status"]["phase"] == "Pending"


async def test_suspend_before_the_scheduler_runs_stops_everything(kube):
    _, api, _ = kube
    await created(api)
    await api.patch(f"{BENCH}/demo", {"spec": {"suspend": True}})
    b = await api.until(NS, "demo", phase("Suspended"))
    assert condition(b, "Completed")["reason"] == "Suspended"
    assert await api.get(f"{JOBS}/demo-scheduler") is None
    assert (await api.get(f"{DEPLOYMENTS}/demo-workers"))["spec"]["replicas"] == 0


async def test_a_benchmark_created_suspended_launches_nothing(kube):
    _, api, _ = kube
    await api.create(f"{CORE}/configmaps", config_map())
    await api.create(BENCH, benchmark(suspend=True))
    await api.until(NS, "demo", phase("Suspended"))
    assert await api.get(f"{JOBS}/demo-scheduler") is None


async def test_a_stopped_run_is_suspended_with_partial_results(kube):
    _, api, _ = kube
    await created(api)
    stopped = FINAL | {"outcome": "stopped", "reason": "stopped on request"}
    await scheduler_ended(api, "demo", 0, json.dumps(stopped))
    b = await api.until(NS, "demo", phase("Suspended"))
    assert b["status"]["summary"]["requestThroughput"] == 12.5


async def test_ttl_deletes_a_finished_benchmark(kube):
    """Gone within the TTL of finishing, and only once finished: the phase it was deleted in is
    read from the object's history, since a poll can miss a 1 s window on a busy machine."""
    cluster, api, _ = kube
    await created(api, ttlSecondsAfterFinished=1)
    await scheduler_ended(api, "demo", 0, json.dumps(FINAL))
    await api.gone(NS, "demo")
    *kept, deleted = cluster.history("benchmarks", NS, "demo")
    assert deleted is None
    last = kept[-1]
    assert last is not None and last["status"]["phase"] == "Succeeded"
    assert last["status"]["completionTime"]


async def test_a_deleted_benchmark_goes_away_while_its_run_is_watched(kube):
    """kopf holds a finalizer while the monitor timer runs: deleting must still finish (the
    objects it owns go with it, by their owner references, in a cluster's garbage collector)."""
    _, api, _ = kube
    await created(api)
    await api.delete(f"{BENCH}/demo")
    await api.gone(NS, "demo", timeout=60)


async def test_a_restarted_operator_creates_nothing_twice_and_picks_the_run_up(kube):
    cluster, api, restart = kube
    await created(api)
    await restart()
    await scheduler_ended(api, "demo", 0, json.dumps(FINAL))
    await api.until(NS, "demo", phase("Succeeded"))
    posts = [r for r in cluster if r.method == "POST" and r.resource is not None]
    kinds = [
        r.resource.plural for r in posts if r.resource.plural in ("jobs", "deployments", "services")
    ]
    assert sorted(kinds) == ["deployments", "jobs", "services"]


async def test_each_benchmark_gets_its_own_warning_event(kube):
    """Two Benchmarks refused at once: each is told why in an Event of its own (a second Event
    in a namespace used to be refused as a name conflict, and kopf drops what it cannot post)."""
    cluster, api, _ = kube
    names = {"broken-a", "broken-b"}
    for name in names:
        await api.create(BENCH, benchmark(name, dataset={"configMapRef": {"name": "absent"}}))

    def warned_each(events: list[dict]) -> bool:
        told = {e["involvedObject"]["name"] for e in events if e["reason"] == "ConfigMapNotFound"}
        return told == names

    await eventually(cluster.events, warned_each, timeout=60)


async def test_the_operator_uses_exactly_the_rbac_it_asks_for(kube):
    cluster, api, _ = kube
    await created(
        api, ttlSecondsAfterFinished=0, results={"persistentVolumeClaim": {"size": "1Gi"}}
    )
    await api.create(BENCH, benchmark("other"))
    await api.until(NS, "other", phase("Pending"))
    await api.patch(f"{BENCH}/other", {"spec": {"suspend": True}})
    await api.until(NS, "other", phase("Suspended"))
    await api.create(BENCH, benchmark("broken", dataset={"configMapRef": {"name": "absent"}}))
    await api.until(NS, "broken", phase("Failed"))
    await warned(cluster, "ConfigMapNotFound")
    claim = {"persistentVolumeClaim": {"claimName": "absent", "path": "d.jsonl"}}
    await api.create(BENCH, benchmark("unclaimed", dataset=claim))
    b = await api.until(NS, "unclaimed", phase("Failed"))
    assert condition(b, "DatasetValid")["reason"] == "ClaimNotFound"
    assert b["status"]["message"] == "persistentvolumeclaim/absent does not exist in this namespace"
    await scheduler_ended(api, "demo", 0, json.dumps(FINAL))
    await api.gone(NS, "demo")  # expired: deleted by the operator
    # Discovery (a resource without a plural) is open to every authenticated client.
    used = {
        rbac_verb(r)
        for r in cluster
        if r.resource is not None and r.resource.plural and r.headers.get("User-Agent") != Api.AGENT
    }
    documents = yaml.safe_load_all((ROOT / "operator" / "rbac.yaml").read_text())
    (role,) = [d for d in documents if d["kind"] == "ClusterRole"]
    granted = {
        (g, res, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for res in rule["resources"]
        for v in rule["verbs"]
    }
    assert used == granted


def rbac_verb(request) -> tuple[str, str, str]:
    """(apiGroup, resource, verb) as an RBAC rule names what a request did."""
    verbs = {"LIST": "list", "WATCH": "watch", "FETCH": "get", "CREATE": "create",
             "UPDATE": "patch", "DELETE": "delete"}  # fmt: skip
    resource = request.resource.plural + (f"/{request.subresource}" if request.subresource else "")
    return request.resource.group, resource, verbs[request.action.value]


async def test_an_operator_limited_to_a_namespace_watches_only_there(tmp_path, monkeypatch):
    async with operating(tmp_path, monkeypatch, namespaces=(NS,)) as (cluster, api, _):
        elsewhere = benchmark() | {"metadata": {"name": "demo", "namespace": "elsewhere"}}
        await api.create("/apis/dagperf.io/v1alpha1/namespaces/elsewhere/benchmarks", elsewhere)
        await created(api)
        operators = [r for r in cluster if r.resource is not None and r.resource.plural
                     and r.headers.get("User-Agent") != Api.AGENT]  # fmt: skip
        assert BENCH in {r.url.path for r in operators}  # watched there, and nothing else:
        # no namespace scan, no CRD watch: what a per-namespace Role (the chart's) allows
        assert {r.namespace for r in operators} == {NS}, [r.url.path for r in operators]
        assert "status" not in await api.benchmark("elsewhere", "demo")


def tokenizer_json() -> str:
    from tokenizers import Tokenizer, models

    return Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]")).to_str()


DATASET_WITH_TOKENIZER = {"configMapRef": {"name": "data"},
                          "tokenizer": {"name": "tok", "key": "tokenizer.json"}}  # fmt: skip


@pytest.mark.parametrize(
    ("files", "complaint"),
    [
        (None, "tokenizer: configmap/tok does not exist"),
        ({"other.json": "{}"}, "tokenizer: configmap/tok has no key 'tokenizer.json'"),
        ({"tokenizer.json": "{not a tokenizer"}, "cannot load the tokenizer at configmap/tok"),
    ],
)
async def test_a_tokenizer_that_cannot_load_fails_before_anything_starts(kube, files, complaint):
    _, api, _ = kube
    if files is not None:
        await api.create(f"{CORE}/configmaps", config_map(name="tok") | {"data": files})
    await api.create(f"{CORE}/configmaps", config_map())
    await api.create(BENCH, benchmark(dataset=DATASET_WITH_TOKENIZER))
    b = await api.until(NS, "demo", phase("Failed"))
    valid = condition(b, "DatasetValid")
    assert (valid["status"], valid["reason"]) == ("False", "InvalidTokenizer")
    assert complaint in valid["message"]
    assert await api.get(f"{JOBS}/demo-scheduler") is None


async def test_a_tokenizer_from_a_config_map_reaches_the_scheduler(kube):
    _, api, _ = kube
    tokenizer = config_map(name="tok") | {"data": {"tokenizer.json": tokenizer_json()}}
    await api.create(f"{CORE}/configmaps", tokenizer)
    await created(api, dataset=DATASET_WITH_TOKENIZER)
    pod = (await api.get(f"{JOBS}/demo-scheduler"))["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    flag = container["command"].index("--tokenizer")
    path = container["command"][flag + 1]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "tokenizer"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tokenizer"]
    assert path == f"{mount['mountPath']}/tokenizer.json" and mount["readOnly"]
    assert volume["configMap"] == {
        "name": "tok", "items": [{"key": "tokenizer.json", "path": "tokenizer.json"}],
    }  # fmt: skip
