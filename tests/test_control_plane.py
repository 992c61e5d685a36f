"""What a real API server says about the CRD, the chart and its RBAC, where an emulator would say
yes to anything: the CRD is structural and established, a Benchmark that breaks its schema is
refused, `helm install` works, the operator's service account may do exactly what the operator
needs (checked by the RBAC authorizer itself), and owned objects are garbage-collected."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest
import yaml

from control_plane import CHART, ROOT, Client, ControlPlane, established, namespace
from runs import alive, eventually

pytestmark = pytest.mark.cluster

CRD_FILE = ROOT / "crds" / "benchmark.yaml"
EXAMPLE = ROOT / "examples" / "benchmark.yaml"
BENCHMARKS = "/apis/dagperf.io/v1alpha1/namespaces/{ns}/benchmarks"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager")
RULES = yaml.safe_load((CHART / "files" / "operator-rules.yaml").read_text())


def example_benchmark(namespace: str, name: str = "example") -> dict:
    (benchmark,) = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d["kind"] == "Benchmark"]
    benchmark["metadata"] |= {"name": name, "namespace": namespace}
    return benchmark


# Where this module's tests make Benchmarks: objects to check, never runs.
NAMESPACES = ("crd", "schema", "unknown", "subresource", "gc")


@pytest.fixture(autouse=True)
async def _no_benchmark_left(control_plane, operator_stopped):
    """No operator may launch the Benchmarks made here: the session's shared one is stopped
    while a test makes them, and they are deleted after it, before an operator watching every
    namespace (this module's chart install, a later test's) would run them on the node."""
    yield
    async with control_plane.admin() as api:
        for ns in NAMESPACES:
            for found in await api.items(BENCHMARKS.format(ns=ns)):
                path = BENCHMARKS.format(ns=ns) + "/" + found["metadata"]["name"]
                await api.delete(path)
                await api.gone(path)


async def install_crd(api: Client) -> None:
    await api.apply(yaml.safe_load(CRD_FILE.read_text()))
    await established(api)


async def test_the_crd_is_accepted_established_and_served(control_plane):
    async with control_plane.admin() as api:
        await install_crd(api)
        found = await api.get("/apis/dagperf.io/v1alpha1")
        (resource,) = [r for r in found["resources"] if r["name"] == "benchmarks"]
        assert resource["kind"] == "Benchmark" and resource["shortNames"] == ["bench"]
        ns = await namespace(api, "crd")
        created = await api.create(BENCHMARKS.format(ns=ns), example_benchmark(ns))
        # Everything the example sets survived the server's pruning of unknown fields; what it
        # leaves out, the server filled in from the schema's defaults.
        spec = created["spec"]
        for key, value in example_benchmark(ns)["spec"].items():
            assert spec[key] == (spec[key] | value if isinstance(value, dict) else value), key
        assert spec["dataset"]["type"] == "dag_jsonl" and spec["suspend"] is False


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda s: s["load"].update(concurrency=-1), "spec.load.concurrency"),
        (lambda s: s["workers"].update(replicas=0), "spec.workers.replicas"),
        (lambda s: s["endpoint"].update(type="completions-v0"), "spec.endpoint.type"),
        (lambda s: s.pop("endpoint"), "spec.endpoint"),
        (lambda s: s["results"]["persistentVolumeClaim"].update(claimName="mine"),
         "give either claimName"),
    ],
    ids=["negative-concurrency", "no-workers", "unknown-endpoint-type", "no-endpoint",
         "claim-and-size"],
)  # fmt: skip
async def test_a_benchmark_that_breaks_the_schema_is_refused_with_422(
    control_plane, change, expected
):
    async with control_plane.admin() as api:
        await install_crd(api)
        ns = await namespace(api, "schema")
        benchmark = example_benchmark(ns, "broken")
        change(benchmark["spec"])
        status, answer = await api.request("POST", BENCHMARKS.format(ns=ns), benchmark)
        assert status == 422, answer
        assert answer["reason"] == "Invalid" and expected in answer["message"], answer


async def test_an_unknown_field_is_refused_by_kubectl_apply(control_plane):
    """kubectl asks for strict field validation, and the server refuses a field the CRD does not
    know (with 400, not 422: pruning happens while decoding, before the schema is checked)
    instead of dropping it silently; the example itself applies as it is."""
    async with control_plane.admin() as api:
        await install_crd(api)
        ns = await namespace(api, "unknown")
        benchmark = example_benchmark(ns, "typo")
        benchmark["spec"]["load"]["concurency"] = 4
        typo = control_plane.kubectl("apply", "-f", "-", input=json.dumps(benchmark))
        assert typo.returncode == 1
        assert 'unknown field "spec.load.concurency"' in typo.stderr, typo.stderr
        assert await api.get(BENCHMARKS.format(ns=ns) + "/typo") is None
        example = control_plane.kubectl("apply", "-n", ns, "-f", str(EXAMPLE))
        assert example.returncode == 0, example.stderr
        assert "benchmark.dagperf.io/example created" in example.stdout
        # The API answers the same to any client that asks for strict validation.
        path = BENCHMARKS.format(ns=ns) + "?fieldValidation=Strict"
        status, answer = await api.request("POST", path, benchmark)
        assert (status, answer["reason"]) == (400, "BadRequest"), answer
        # Without it the server prunes the field: nothing unknown reaches the operator.
        created = await api.create(BENCHMARKS.format(ns=ns), benchmark)
        assert "concurency" not in created["spec"]["load"]


async def test_status_is_a_subresource_a_spec_write_cannot_touch(control_plane):
    async with control_plane.admin() as api:
        await install_crd(api)
        ns = await namespace(api, "subresource")
        path = BENCHMARKS.format(ns=ns) + "/example"
        await api.create(BENCHMARKS.format(ns=ns), example_benchmark(ns))
        written = await api.patch(path, {"status": {"phase": "Running"}})
        assert "status" not in written  # ignored on the main resource
        written = await api.patch(path + "/status", {"status": {"phase": "Running"}})
        assert written["status"]["phase"] == "Running"
        status, answer = await api.request(
            "PATCH", path + "/status", {"status": {"phase": "Exploded"}},
            content_type="application/merge-patch+json",
        )  # fmt: skip
        assert status == 422 and "status.phase" in answer["message"], answer


async def test_deleting_a_benchmark_collects_what_it_owns(control_plane):
    """The garbage collector follows ownerReferences from a Benchmark to its children, as the
    operator sets them; the foreground form waits until the children are gone."""
    async with control_plane.admin() as api:
        await install_crd(api)
        ns = await namespace(api, "gc")
        owner = await api.create(BENCHMARKS.format(ns=ns), example_benchmark(ns))
        reference = {
            "apiVersion": "dagperf.io/v1alpha1", "kind": "Benchmark", "name": "example",
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True,
        }  # fmt: skip
        for n in range(3):
            await api.create(f"/api/v1/namespaces/{ns}/configmaps", {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": f"child-{n}", "ownerReferences": [reference]},
            })  # fmt: skip
        await api.create(f"/api/v1/namespaces/{ns}/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bystander"},
        })  # fmt: skip
        await api.delete(BENCHMARKS.format(ns=ns) + "/example", {"propagationPolicy": "Foreground"})
        await api.gone(BENCHMARKS.format(ns=ns) + "/example")
        left = [
            c["metadata"]["name"] for c in await api.items(f"/api/v1/namespaces/{ns}/configmaps")
        ]
        assert "bystander" in left and not [n for n in left if n.startswith("child-")]


# --- the chart and its RBAC --------------------------------------------------------------------


def _verbs(rules: list[dict]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


NEVER = [  # what the operator has no business doing, anywhere
    ("", "secrets", "get"), ("", "secrets", "list"), ("", "secrets", "watch"),
    ("", "configmaps", "list"), ("", "configmaps", "update"), ("", "pods", "create"),
    ("", "pods", "delete"), ("", "pods/exec", "create"), ("", "serviceaccounts", "create"),
    ("batch", "jobs", "update"), ("apps", "deployments", "delete"),
    ("rbac.authorization.k8s.io", "roles", "create"),
    ("rbac.authorization.k8s.io", "rolebindings", "create"),
    ("dagperf.io", "benchmarks", "create"), ("dagperf.io", "benchmarks", "update"),
]  # fmt: skip
CLUSTER_WIDE_NEVER = [
    ("", "nodes", "list"), ("", "namespaces", "delete"), ("", "persistentvolumes", "create"),
    ("rbac.authorization.k8s.io", "clusterroles", "create"),
    ("rbac.authorization.k8s.io", "clusterrolebindings", "create"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "create"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "delete"),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "create"),
]  # fmt: skip


async def allowed(
    api: Client, account: str, group: str, resource: str, verb: str, ns: str | None
) -> bool:
    """What the RBAC authorizer answers for the service account `namespace:name`."""
    sa_ns, sa_name = account.split(":")
    resource, _, subresource = resource.partition("/")
    attributes = {"group": group, "resource": resource, "verb": verb, "subresource": subresource}
    if ns is not None:
        attributes["namespace"] = ns
    review = await api.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": f"system:serviceaccount:{sa_ns}:{sa_name}",
                 "groups": ["system:serviceaccounts", f"system:serviceaccounts:{sa_ns}",
                            "system:authenticated"],
                 "resourceAttributes": attributes},
    })  # fmt: skip
    return review["status"].get("allowed", False)


async def test_helm_installs_the_chart_with_least_privilege_in_watched_namespaces(control_plane):
    """Watching listed namespaces, the operator gets its rules there and nothing cluster-wide,
    and a token for its service account is refused everything else by the server itself."""
    async with control_plane.admin() as api:
        for ns in ("rbac-system", "rbac-watched", "rbac-other"):
            await namespace(api, ns)
        control_plane.helm("install", "least", str(CHART), "--namespace", "rbac-system",
             "--set", "watchNamespaces={rbac-watched}", "--wait=false")  # fmt: skip
        await established(api)
        account = "rbac-system:least-dagperf-operator"
        for group, resource, verb in sorted(_verbs(RULES)):
            assert await allowed(api, account, group, resource, verb, "rbac-watched"), (
                resource, verb)  # fmt: skip
            assert not await allowed(api, account, group, resource, verb, "rbac-other"), (
                resource, verb)  # fmt: skip
            assert not await allowed(api, account, group, resource, verb, None), (resource, verb)
        for group, resource, verb in NEVER:
            assert not await allowed(api, account, group, resource, verb, "rbac-watched"), (
                resource, verb)  # fmt: skip
        for group, resource, verb in CLUSTER_WIDE_NEVER:
            assert not await allowed(api, account, group, resource, verb, None), (resource, verb)

        # The same, seen from the token's side: a real request, refused with 403.
        token = await api.token("rbac-system", "least-dagperf-operator")
    async with control_plane.as_token(token) as operator:
        assert await operator.items("/api/v1/namespaces/rbac-watched/pods") == []
        refused = ("namespaces/rbac-watched/secrets", "namespaces/rbac-other/pods", "pods", "nodes")
        for path in (f"/api/v1/{p}" for p in refused):
            status, answer = await operator.request("GET", path)
            assert status == 403 and answer["reason"] == "Forbidden", (path, answer)
    control_plane.helm("uninstall", "least", "--namespace", "rbac-system")


async def test_helm_installs_the_chart_watching_every_namespace(control_plane):
    """Cluster-wide, the operator's rules hold in any namespace, plus reading its CRD; it still
    may not read Secrets, touch RBAC or CRDs, or see nodes."""
    async with control_plane.admin() as api:
        await namespace(api, "wide-system")
        control_plane.helm("install", "wide", str(CHART), "--namespace", "wide-system")
        account = "wide-system:wide-dagperf-operator"
        for group, resource, verb in sorted(_verbs(RULES)):
            assert await allowed(api, account, group, resource, verb, "anywhere"), (resource, verb)
        crds = ("apiextensions.k8s.io", "customresourcedefinitions")
        assert await allowed(api, account, *crds, "watch", None)
        for group, resource, verb in NEVER:
            assert not await allowed(api, account, group, resource, verb, "anywhere"), (
                resource, verb)  # fmt: skip
        for group, resource, verb in CLUSTER_WIDE_NEVER:
            assert not await allowed(api, account, group, resource, verb, None), (resource, verb)
        deployment = await api.get(
            "/apis/apps/v1/namespaces/wide-system/deployments/wide-dagperf-operator"
        )
        assert deployment is not None
        # The chart keeps its control key across upgrades (helm's lookup, against a live server).
        path = "/api/v1/namespaces/wide-system/secrets/wide-dagperf-control-key"
        key = (await api.get(path))["data"]["control.key"]
        control_plane.helm("upgrade", "wide", str(CHART), "--namespace", "wide-system",
             "--set", "operator.verbose=true")  # fmt: skip
        assert (await api.get(path))["data"]["control.key"] == key
        control_plane.helm("uninstall", "wide", "--namespace", "wide-system")
        await api.gone("/apis/apps/v1/namespaces/wide-system/deployments/wide-dagperf-operator")


async def test_the_test_namespaces_enforce_the_restricted_pod_security_standard(control_plane):
    """So every pod the chart and the operator make, which the cluster tests run in such
    namespaces, is shown to meet it: a pod that does not is refused at admission."""
    async with control_plane.admin() as api:
        ns = await namespace(api, "restricted")
        sa = f"/api/v1/namespaces/{ns}/serviceaccounts/default"  # made by its controller
        await eventually(lambda: api.get(sa), lambda found: found is not None)
        bare = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"},
            "spec": {"containers": [{"name": "c", "image": "dagperf:latest"}]},
        }  # fmt: skip
        status, answer = await api.request("POST", f"/api/v1/namespaces/{ns}/pods", bare)
        assert status == 403 and 'violates PodSecurity "restricted' in answer["message"], answer


def test_up_prints_a_working_kubeconfig_and_down_leaves_no_process_behind(tmp_path):
    plane = ControlPlane.up(tmp_path / "plane")
    assert plane.kubeconfig == plane.directory / "admin.kubeconfig"
    version = subprocess.run(
        [str(plane.directory / "bin" / "kubectl"), "--kubeconfig", str(plane.kubeconfig),
         "version", "-o", "json"],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    versions = json.loads(version.stdout)
    assert versions["serverVersion"]["gitVersion"] == versions["clientVersion"]["gitVersion"]
    assert versions["serverVersion"]["gitVersion"].startswith("v1.")
    pids = {c: int((plane.directory / f"{c}.pid").read_text()) for c in COMPONENTS}
    assert all(alive(pid) for pid in pids.values()), pids

    plane.down()
    assert not [c for c, pid in pids.items() if alive(pid)]
    assert not list(plane.directory.glob("*.pid"))
    port = int(plane.url.rsplit(":", 1)[1])
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)
