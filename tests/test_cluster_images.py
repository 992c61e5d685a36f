"""The Kubernetes quick start as the README writes it, in the real control plane, with every pod
a podman container of the image the manifests name: the chart installed by helm with its
defaults (its operator runs with its service account's token through its in-cluster
configuration), examples/simulator.yaml and examples/benchmark.yaml applied unchanged, and the
Benchmark run to Succeeded by a scheduler and two workers, every container as uid 10001 with a
read-only root and no capabilities, its volumes given to the pod's fsGroup as a kubelet does.
The suite's node (tests/node.py, containers mode) plays the kubelet."""

from __future__ import annotations

import json

import pytest

from dagperf_operator.manifests import Names
from dagperf_operator.settings import OperatorSettings

import image_runtime
from control_plane import CHART, ROOT, established, namespace
from node import Node
from runs import eventually, read_jsonl

pytestmark = [pytest.mark.cluster, pytest.mark.image]

EXAMPLES = ROOT / "examples"
BENCHMARK = "example"  # metadata.name in examples/benchmark.yaml
REQUESTS = 200  # its spec.load.requestCount
UID = OperatorSettings().run_as_user


async def test_the_quick_start_runs_with_every_pod_a_container_of_the_image(
    control_plane, image, tmp_path
):
    system, ns = "dagperf-images", "bench-images"
    path = f"/apis/dagperf.io/v1alpha1/namespaces/{ns}/benchmarks/{BENCHMARK}"
    async with control_plane.admin() as api:
        for name in (system, ns):
            await namespace(api, name)
        node = Node(
            control_plane, api, tmp_path / "node", "node-images", {system, ns}, containers=True
        )
        async with node:
            settings = [
                f"watchNamespaces={{{ns}}}",
                "operator.pollIntervalSeconds=1",
                "benchmarkDefaults.metricsLingerSeconds=0",
            ]
            sets = [word for setting in settings for word in ("--set", setting)]
            control_plane.helm("install", "dagperf", str(CHART), "--namespace", system, *sets)
            try:
                await established(api)
                for example in (EXAMPLES / "simulator.yaml", EXAMPLES / "benchmark.yaml"):
                    applied = control_plane.kubectl("apply", "-n", ns, "-f", str(example))
                    assert applied.returncode == 0, applied.stderr
                done = await eventually(
                    lambda: api.get(path),
                    lambda b: (b.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
                    timeout=420,
                )
            finally:
                print(node.output())  # shown when the test failed
                control_plane.helm("uninstall", "dagperf", "--namespace", system)

    status = done["status"]
    assert status["phase"] == "Succeeded", status
    assert status["progress"]["requestsCompleted"] == REQUESTS
    assert status["progress"]["errors"] == 0

    # Every pod was a container of the image the chart and the examples name.
    name = image_runtime.image_name()
    expected = image_runtime.podman("image", "inspect", "--format={{.Id}}", name).stdout.strip()
    assert set(node.images) == set(node.started)
    assert set(node.images.values()) == {expected}
    pods = ("dagperf-operator-", "dagperf-simulator-", "example-scheduler-", "example-workers-")
    counts = {pod: len([n for n in node.images if n.startswith(pod)]) for pod in pods}
    assert counts == dict(zip(pods, (1, 1, 1, 2), strict=True)), node.images

    # The export files on the claim the operator made, written by the image's user.
    results = node.claim(Names(BENCHMARK).claim) / BENCHMARK
    records = read_jsonl(results / "profile_export.jsonl")
    assert len(records) == REQUESTS and [r for r in records if r["error"]] == []
    exported = json.loads((results / "profile_export_aiperf.json").read_text())
    assert exported["request_count"]["avg"] == REQUESTS
    assert {p.stat().st_uid for p in results.iterdir()} == {UID}
