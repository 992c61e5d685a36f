"""The operator in a real cluster, installed by `helm install` and running as the chart's pod with
its service account's token: RBAC, admission, the Job and ReplicaSet controllers and the garbage
collector are the real ones, and every pod is placed by kube-scheduler and run by the kubelet on
containerd (the real node, tests/cluster/node.sh), its results on a volume the local-path
provisioner made for its claim. The endpoint is the simulator in this test's loop on the node's
address, behind a Gate where a test needs the run held in flight (the `cluster` fixture). What
a Benchmark runs (its datasets, a session config, a search) is in test_cluster_workloads.py."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from operated_cluster import KEY, condition, failed_job, phase
from real_node import NODE_IP, container_pid, kill
from runs import alive, connected_to, eventually, read_jsonl, serving

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("cluster", ["every", "listed"], indirect=True)
async def test_a_benchmark_runs_to_success_with_exports_on_the_volume(cluster):
    applied = cluster.plane.kubectl(
        "apply", "-f", "-", input=json.dumps(cluster.benchmark(load={"concurrency": 3}))
    )
    assert applied.returncode == 0, applied.stderr
    running = await cluster.until("demo", phase("Running"))
    await cluster.gate.holding(3)  # the three roots are in flight
    assert running["status"]["workers"] == {"desired": 2, "registered": 2}
    cluster.gate.open()
    done = await cluster.until("demo", phase("Succeeded"))

    status = done["status"]
    assert status["progress"]["requestsCompleted"] == 9 and status["progress"]["errors"] == 0
    assert status["summary"]["requestThroughput"] > 0 and status["summary"]["errorRate"] == 0
    assert status["branchStats"]["children_completed"] == 6
    assert condition(done, "Completed")["status"] == "True"

    results = await cluster.claim("results") / "demo"
    records = read_jsonl(results / "profile_export.jsonl")
    assert len(records) == 9 and not any(r["error"] for r in records)
    exported = json.loads((results / "profile_export_aiperf.json").read_text())
    assert exported["request_count"]["avg"] == 9
    assert KEY not in (results / "profile_export_aiperf.json").read_text()
    report = (results / "report.html").read_text()  # spec.results.report's default
    assert "<title>dagperf report: demo</title>" in report and KEY not in report

    # The Job controller saw the scheduler's pod succeed; the workers were scaled to zero and
    # the ReplicaSet controller removed their pods.
    job = f"/apis/batch/v1/namespaces/{cluster.ns}/jobs/demo-scheduler"
    await eventually(lambda: cluster.api.get(job), lambda j: j["status"].get("succeeded") == 1)
    listed = cluster.plane.kubectl("get", "benchmarks", "-n", cluster.ns)
    assert listed.stdout.split("\n")[1].split()[:3] == ["demo", "Succeeded", "9/9"], listed.stdout
    # The operator's pod became ready by its startup probe (the chart's port and path answer)
    # and never restarted.
    (operator,) = await cluster.operator_pods()
    (container,) = operator["status"]["containerStatuses"]
    assert container["ready"] and container["started"] and container["restartCount"] == 0
    await eventually(lambda: cluster.pods("demo-workers-"), lambda pods: pods == [])


async def test_the_endpoint_options_a_benchmark_says_reach_the_requests_its_workers_send(cluster):
    """The affinity headers, the request path and the timeout of spec.endpoint are what the
    workers use: a relay in front of the simulator, at a path of its own, sees every request
    with the routing key in the header the Benchmark names (and not in the default ones), and
    holds the first one unanswered, which fails by the Benchmark's timeout."""
    seen: list[tuple[str, dict[str, str]]] = []
    ended = asyncio.Event()

    async def relay(request: web.Request) -> web.StreamResponse:
        seen.append((request.path, dict(request.headers)))
        if len(seen) == 1:  # not answered in the run: the worker's timeout ends it
            await ended.wait()  # (the server's shutdown would wait for it)
            return web.Response(status=503)
        async with aiohttp.ClientSession() as session, session.post(
            cluster.sim.url + "/v1/chat/completions",
            data=await request.read(),
            headers={"Authorization": request.headers["Authorization"],
                     "Content-Type": "application/json"},
        ) as answer:  # fmt: skip
            return web.Response(body=await answer.read(), status=answer.status,
                                content_type=answer.content_type)  # fmt: skip

    app = web.Application()
    app.router.add_post("/custom/chat", relay)
    cluster.gate.open()
    async with serving(app, NODE_IP) as url:
        endpoint = {
            "url": url, "model": "sim", "apiKeySecretRef": {"name": "endpoint"}, "streaming": False,
            "path": "/custom/chat", "sessionAffinityHeaders": ["X-Route-Key"],
            "requestTimeoutSeconds": 2,
        }  # fmt: skip
        await cluster.start(endpoint=endpoint, verdict={"maxErrorRate": 1.0})
        done = await cluster.until("demo", phase("Succeeded"))
        ended.set()
    assert {path for path, _ in seen} == {"/custom/chat"} and len(seen) >= 3
    for _, headers in seen:
        assert headers.get("X-Route-Key") and "X-Session-ID" not in headers
    results = await cluster.claim("results") / "demo"
    records = read_jsonl(results / "profile_export.jsonl")
    timed_out = [r for r in records if (r["error"] or {}).get("type") == "TimeoutError"]
    assert len(timed_out) == 1 and "within 2.0 s" in timed_out[0]["error"]["message"]
    assert done["status"]["progress"]["errors"] == 1


async def test_suspending_a_running_benchmark_keeps_what_it_measured(cluster):
    """spec.suspend mid-run: the operator stops the scheduler through its control endpoint,
    what it measured lands on the volume, and the workers are scaled to zero."""
    await cluster.start(load={"concurrency": 2, "requestCount": 1000})
    await cluster.until("demo", phase("Running"))
    await cluster.gate.holding(2)
    await cluster.api.patch(cluster.path("demo"), {"spec": {"suspend": True}})
    # The operator asked the scheduler to stop; only then may the held requests finish.
    await cluster.until(
        "demo", lambda b: (b.get("status") or {}).get("message", "").startswith("suspending")
    )
    cluster.gate.open()
    done = await cluster.until("demo", phase("Suspended"))

    status = done["status"]
    assert status["progress"]["requestsCompleted"] == 2 and status["progress"]["errors"] == 0
    assert status["progress"]["requestsTotal"] == 1000
    assert condition(done, "Completed")["reason"] == "Suspended"
    records = read_jsonl(await cluster.claim("results") / "demo" / "profile_export.jsonl")
    assert len(records) == 2 and not any(r["error"] for r in records)
    deployment = f"/apis/apps/v1/namespaces/{cluster.ns}/deployments/demo-workers"
    assert (await cluster.api.get(deployment))["spec"]["replicas"] == 0
    await eventually(lambda: cluster.pods("demo-workers-"), lambda left: left == [], timeout=60)


async def test_deleting_a_benchmark_collects_its_children_and_stops_its_pods(cluster):
    await cluster.start(load={"concurrency": 3})
    await cluster.until("demo", phase("Running"))
    await cluster.gate.holding(3)
    owned = await cluster.owned("demo")
    assert {k: len(v) for k, v in owned.items()} == {
        "Job": 1, "Deployment": 1, "Service": 1, "Secret": 1, "NetworkPolicy": 1,
    }  # fmt: skip
    running = await cluster.pods("demo-")
    assert len(running) == 3  # the scheduler and two workers
    processes = [container_pid(cluster.plane, p) for p in running]

    await cluster.api.delete(cluster.path("demo"))  # as `kubectl delete` does: in the background
    await cluster.api.gone(cluster.path("demo"))
    await eventually(lambda: cluster.owned("demo"), lambda left: left == {}, timeout=60)
    await eventually(lambda: cluster.pods("demo-"), lambda left: left == [], timeout=60)
    assert not [pid for pid in processes if alive(pid)]  # the kubelet stopped their containers
    cluster.gate.open()


async def test_an_operator_restarted_mid_run_adopts_it_without_duplicating_children(cluster):
    await cluster.start(load={"concurrency": 3})
    await cluster.until("demo", phase("Running"))
    await cluster.gate.holding(3)
    (operator,) = await cluster.operator_pods()
    await cluster.api.delete(
        f"/api/v1/namespaces/{cluster.system}/pods/{operator['metadata']['name']}"
    )  # the ReplicaSet controller starts another, which the node runs
    await eventually(
        cluster.operator_pods,
        lambda pods: (
            [p["metadata"]["uid"] for p in pods] not in ([], [operator["metadata"]["uid"]])
            and all(p["status"].get("phase") == "Running" for p in pods)
        ),
    )
    # the old one ends (the next test's operator is the new one alone)
    await cluster.api.gone(
        f"/api/v1/namespaces/{cluster.system}/pods/{operator['metadata']['name']}", timeout=120
    )
    cluster.gate.open()
    done = await cluster.until("demo", phase("Succeeded"))
    assert done["status"]["progress"]["requestsCompleted"] == 9
    owned = await cluster.owned("demo")
    assert {k: len(v) for k, v in owned.items() if k != "Secret"} == {
        "Job": 1, "Deployment": 1, "Service": 1, "NetworkPolicy": 1,
    }  # fmt: skip
    events = await cluster.api.items(f"/api/v1/namespaces/{cluster.ns}/events")
    scheduled = [e["involvedObject"]["name"] for e in events if e["reason"] == "Scheduled"]
    assert len([n for n in scheduled if n.startswith("demo-scheduler-")]) == 1, scheduled


async def test_a_worker_killed_mid_run_is_restarted_and_its_requests_are_lost(cluster):
    await cluster.start(load={"concurrency": 3})
    await cluster.until("demo", phase("Running"))
    await cluster.gate.holding(3)
    # The one to kill holds requests in flight (the routing decides which does): its
    # connections to the simulator say so.
    port = int(cluster.sim.url.rsplit(":", 1)[1])
    workers = await cluster.pods("demo-workers-")
    held = next(w for w in workers if connected_to(container_pid(cluster.plane, w), port))
    kill(cluster.plane, held)
    victim = held["metadata"]["name"]
    restarted = await eventually(
        lambda: cluster.api.get(f"/api/v1/namespaces/{cluster.ns}/pods/{victim}"),
        lambda p: (
            p["status"]["containerStatuses"][0]["restartCount"] == 1
            and "running" in p["status"]["containerStatuses"][0]["state"]
        ),
    )
    last = restarted["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert last["exitCode"] == 137
    cluster.gate.open()
    done = await cluster.until("demo", lambda b: phase("Succeeded")(b) or phase("Failed")(b))

    records = read_jsonl(await cluster.claim("results") / "demo" / "profile_export.jsonl")
    lost = [r for r in records if (r["error"] or {}).get("type") == "WorkerLost"]
    assert lost and all(victim in r["error"]["message"] for r in lost)
    # lost by the run, not failed by the endpoint: cut, apart from its errors
    assert done["status"]["progress"]["errors"] == 0
    assert done["status"]["progress"]["cut"] == len(lost)
    fine = [r for r in records if not r["error"]]
    assert all(not r["metadata"]["worker_id"].startswith(victim) for r in fine)
    # Which roots the victim held is the routing's choice; the verdict must follow from it.
    if fine:
        assert phase("Succeeded")(done), done["status"]
    else:
        assert done["status"]["message"].startswith("the run failed: nothing was measured")


async def test_a_scheduler_pod_that_dies_fails_the_benchmark(cluster):
    await cluster.start(load={"concurrency": 3})
    await cluster.until("demo", phase("Running"))
    await cluster.gate.holding(3)
    (scheduler,) = await cluster.pods("demo-scheduler-")
    kill(cluster.plane, scheduler)
    failed = await cluster.until("demo", phase("Failed"))
    assert "137" in failed["status"]["message"], failed["status"]
    assert condition(failed, "Completed")["status"] == "False"
    job = f"/apis/batch/v1/namespaces/{cluster.ns}/jobs/demo-scheduler"
    await eventually(lambda: cluster.api.get(job), failed_job)
    deployment = f"/apis/apps/v1/namespaces/{cluster.ns}/deployments/demo-workers"
    assert (await cluster.api.get(deployment))["spec"]["replicas"] == 0
    await eventually(lambda: cluster.pods("demo-workers-"), lambda left: left == [], timeout=60)
    cluster.gate.open()


async def test_two_benchmarks_run_at_once_each_to_its_own_results(cluster):
    await cluster.start("alpha", load={"concurrency": 3})
    # beta's results go to a claim the operator makes for it (and deletes with it)
    await cluster.start("beta", load={"concurrency": 3},
                        results={"persistentVolumeClaim": {"size": "1Gi"}})  # fmt: skip
    for name in ("alpha", "beta"):
        await cluster.until(name, phase("Running"))
    await cluster.gate.holding(6)  # both runs' roots in flight together
    cluster.gate.open()
    for name in ("alpha", "beta"):
        done = await cluster.until(name, phase("Succeeded"))
        assert done["status"]["progress"]["requestsCompleted"] == 9
        claim = {"alpha": "results", "beta": "beta-results"}[name]
        records = read_jsonl(await cluster.claim(claim) / name / "profile_export.jsonl")
        assert len(records) == 9 and not any(r["error"] for r in records)
        assert all(r["metadata"]["worker_id"].startswith(f"{name}-workers-") for r in records)
    assert (await cluster.owned("beta"))["PersistentVolumeClaim"] == ["beta-results"]


async def test_status_stays_right_while_others_write_the_benchmark(cluster):
    """A user (or another controller) labels and annotates the Benchmark all through its run:
    each write bumps its resourceVersion under the operator's patches. The run still ends once,
    with its status whole, and nothing is created twice."""
    await cluster.start(load={"concurrency": 3})
    writes = 0

    async def meddle() -> None:
        nonlocal writes
        while True:
            patch = {"metadata": {"annotations": {"example.com/touched": str(writes)},
                                  "labels": {"touched": str(writes % 7)}}}  # fmt: skip
            await cluster.api.patch(cluster.path("demo"), patch)
            writes += 1
            await asyncio.sleep(0.01)

    meddler = asyncio.create_task(meddle())
    try:
        await cluster.until("demo", phase("Running"))
        await cluster.gate.holding(3)
        cluster.gate.open()
        done = await cluster.until("demo", phase("Succeeded"))
    finally:
        meddler.cancel()
    assert writes > 20
    assert done["status"]["progress"]["requestsCompleted"] == 9
    assert condition(done, "Completed")["status"] == "True"
    owned = await cluster.owned("demo")
    assert len(owned["Job"]) == len(owned["Deployment"]) == len(owned["Service"]) == 1


async def test_a_finished_benchmark_goes_after_its_ttl_and_takes_its_children(cluster):
    cluster.gate.open()
    created = await cluster.start(load={"concurrency": 3}, ttlSecondsAfterFinished=1)
    since = created["metadata"]["resourceVersion"]
    events = []  # watched, not polled: the 1 s TTL can end the Benchmark between two polls
    async with asyncio.timeout(120):
        async for event in cluster.api.changes(cluster.path(), "demo", since):
            events.append(event)
            if event["type"] == "DELETED":  # by the operator's TTL timer
                break
    succeeded = [i for i, e in enumerate(events) if phase("Succeeded")(e["object"])]
    assert succeeded and events[-1]["type"] == "DELETED", [e["type"] for e in events]
    assert not any(e["object"]["metadata"].get("deletionTimestamp") for e in events[: succeeded[0]])
    await eventually(lambda: cluster.owned("demo"), lambda left: left == {}, timeout=60)
    await eventually(lambda: cluster.pods("demo-"), lambda left: left == [], timeout=60)
    # What it measured stays on the volume: the claim is the user's, not the Benchmark's.
    assert (await cluster.claim("results") / "demo" / "profile_export_aiperf.json").exists()
