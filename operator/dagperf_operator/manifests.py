"""What a Benchmark becomes: pure functions from its spec to Kubernetes objects, as dicts.

A scheduler Job (one pod, no retries: a benchmark run is not idempotent), a Service for its
ZeroMQ and metrics ports, a worker Deployment, the results claim when one is to be created, the
Secret with the run's CURVE keys and control token, and a NetworkPolicy that admits only the
Benchmark's worker pods to the scheduler's ZeroMQ port (its metrics port stays open to
Prometheus and the operator; POST /stop there needs the control token). The handlers add owner
references (so deleting the Benchmark deletes them) and create them.

Each pod mounts only its half of the key Secret: the scheduler its key pair, the workers'
public key and the control token; the workers their key pair and the scheduler's public key.

A dataset named by a URL is fetched into the scheduler pod by an init container (`dagperf
fetch`, the same image and security context) into an emptyDir at DATASET_DIR, renamed there only
once its SHA-256 is right; the scheduler mounts it read-only and reads a local file. The URL is
given to the init container in its environment, not its command line: its query may be a
presigned URL's signature.

Every pod runs as a non-root user with a read-only root filesystem (an emptyDir at /tmp for
scratch), no privilege escalation, no capabilities, the runtime's seccomp profile and no service
account token (they never call the Kubernetes API), with resource requests set. The API key
reaches workers only as an environment variable from the Secret the spec names, and the
scheduler only when it must ask the server for a model name.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, cast

from pydantic import BaseModel

from dagperf.fetch import file_name
from dagperf.keys import FILES, SCHEDULER_FILES, WORKER_FILES
from dagperf.sources import SESSION_CONFIG
from dagperf.verdict import DEFAULT_MAX_ERROR_RATE
from dagperf_operator import kube_objects as k8s
from dagperf_operator.settings import OperatorSettings
from dagperf_operator.spec import BenchmarkSpec, Placement, Resources, health_options, load_config

DATASET_DIR = "/dataset"
TOKENIZER_FILE = "/tokenizer/tokenizer.json"
RESULTS_DIR = "/results"
TERMINATION_LOG = "/dev/termination-log"
KEYS_DIR = "/etc/dagperf/keys"
FETCH_CONTAINER = "fetch-dataset"
DATASET_URL_ENV = "DAGPERF_DATASET_URL"


@dataclass(frozen=True)
class Names:
    benchmark: str

    @property
    def scheduler(self) -> str:  # the Job and its Service
        return f"{self.benchmark}-scheduler"

    @property
    def workers(self) -> str:
        return f"{self.benchmark}-workers"

    @property
    def claim(self) -> str:
        return f"{self.benchmark}-results"

    @property
    def keys(self) -> str:  # the Secret, and the NetworkPolicy guarding the scheduler
        return f"{self.benchmark}-keys"


def labels(benchmark: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "dagperf",
        "app.kubernetes.io/instance": benchmark,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "dagperf-operator",
    }


def _pod_security(settings: OperatorSettings) -> k8s.PodSecurityContext:
    uid = settings.run_as_user
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


CONTAINER_SECURITY: k8s.SecurityContext = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
}


def _container(
    name: str,
    image: str,
    command: list[str],
    resources: k8s.ResourceRequirements,
    settings: OperatorSettings,
) -> k8s.Container:
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": command,
        "env": [{"name": "TMPDIR", "value": "/tmp"}, {"name": "HOME", "value": "/tmp"}],
        "resources": resources,
        "securityContext": CONTAINER_SECURITY,
        "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}],
    }


def _keys_volume(name: str, files: tuple[str, ...]) -> k8s.Volume:
    items: list[k8s.KeyToPath] = [{"key": file, "path": file} for file in files]
    secret: k8s.SecretVolumeSource = {
        "secretName": Names(name).keys,
        "items": items,
        "defaultMode": 0o440,
    }
    return {"name": "keys", "secret": secret}


KEYS_MOUNT: k8s.VolumeMount = {"name": "keys", "mountPath": KEYS_DIR, "readOnly": True}


def keys_secret(name: str, files: dict[str, str]) -> k8s.Secret:
    """The run's key set (`dagperf.keys.KeySet.files()`), as a Secret."""
    data = {key: base64.b64encode(value.encode()).decode() for key, value in files.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": Names(name).keys, "labels": labels(name, "keys")},
        "type": "Opaque",
        "data": data,
    }


def scheduler_network_policy(name: str, settings: OperatorSettings) -> k8s.NetworkPolicy:
    """Only this Benchmark's worker pods reach its scheduler's ZeroMQ port."""
    instance = {"app.kubernetes.io/instance": name}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": Names(name).keys, "labels": labels(name, "scheduler")},
        "spec": {
            "podSelector": {"matchLabels": instance | {"app.kubernetes.io/component": "scheduler"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {
                            "podSelector": {
                                "matchLabels": instance | {"app.kubernetes.io/component": "worker"}
                            }
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": settings.zmq_port}],
                },
                {"ports": [{"protocol": "TCP", "port": settings.metrics_port}]},
            ],
        },
    }


def _api_key_env(spec: BenchmarkSpec) -> list[k8s.EnvVar]:
    secret = spec.endpoint.api_key_secret_ref
    if secret is None:
        return []
    ref: k8s.EnvVarSource = {"secretKeyRef": {"name": secret.name, "key": secret.key}}
    return [{"name": "OPENAI_API_KEY", "valueFrom": ref}]


def _resources(
    spec_resources: Resources | None, default: dict[str, Any]
) -> k8s.ResourceRequirements:
    if spec_resources is None:  # the chart's value, passed on as written: the API server checks it
        return cast(k8s.ResourceRequirements, default)
    return {"requests": dict(spec_resources.requests), "limits": dict(spec_resources.limits)}


def model_flags(options: BaseModel, prefix: str = "") -> list[str]:
    """The flags that give the scheduler these options (one of the CLI's flat models): one per
    option not at its default, named as the CLI generates them from the same model."""
    flags: list[str] = []
    for name, value in options.model_dump().items():
        if value is None or value == type(options).model_fields[name].default:
            continue
        flag = prefix + name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(f"--{flag}" if value else f"--no-{flag}")
        else:
            flags += [f"--{flag}", str(value)]
    return flags


def _dataset_file(spec: BenchmarkSpec, dataset_key: str | None) -> str:
    """Where the scheduler reads the dataset: under DATASET_DIR, a ConfigMap's key, a path on a
    claim, or the file the init container fetched from a URL."""
    if spec.dataset.url is not None:
        return f"{DATASET_DIR}/{file_name(spec.dataset.url.url)}"
    return f"{DATASET_DIR}/{dataset_key}"


def _dataset_flags(spec: BenchmarkSpec, dataset_key: str | None) -> list[str]:
    where = _dataset_file(spec, dataset_key)
    if spec.dataset.type == SESSION_CONFIG:
        return ["--session-config", where]
    return ["--input-file", where, "--custom-dataset-type", spec.dataset.type]


def _dataset_volume(spec: BenchmarkSpec) -> k8s.Volume:
    dataset = spec.dataset
    if dataset.persistent_volume_claim is not None:
        claim: k8s.PersistentVolumeClaimVolumeSource = {
            "claimName": dataset.persistent_volume_claim.claim_name,
            "readOnly": True,
        }
        return {"name": "dataset", "persistentVolumeClaim": claim}
    if dataset.config_map_ref is not None:
        return {"name": "dataset", "configMap": {"name": dataset.config_map_ref.name}}
    assert dataset.url is not None
    limit = dataset.url.size_limit
    return {"name": "dataset", "emptyDir": {"sizeLimit": limit} if limit else {}}


def _inputs(spec: BenchmarkSpec) -> tuple[list[k8s.VolumeMount], list[k8s.Volume]]:
    """What the scheduler reads, mounted read-only: the tokenizer, if any, and the dataset."""
    mounts: list[k8s.VolumeMount] = []
    volumes: list[k8s.Volume] = []
    if (tokenizer := spec.dataset.tokenizer) is not None:
        directory, file = TOKENIZER_FILE.rsplit("/", 1)
        mounts.append({"name": "tokenizer", "mountPath": directory, "readOnly": True})
        items: list[k8s.KeyToPath] = [{"key": tokenizer.key, "path": file}]
        volumes.append({"name": "tokenizer", "configMap": {"name": tokenizer.name, "items": items}})
    mounts.append({"name": "dataset", "mountPath": DATASET_DIR, "readOnly": True})
    volumes.append(_dataset_volume(spec))
    return mounts, volumes


def _fetch_container(
    spec: BenchmarkSpec, image: str, resources: k8s.ResourceRequirements, settings: OperatorSettings
) -> k8s.Container | None:
    """The init container that fetches a URL's dataset into the emptyDir, or None."""
    url = spec.dataset.url
    if url is None:
        return None
    command = ["dagperf", "fetch", "--url-env", DATASET_URL_ENV, "--sha256", url.sha256.lower()]
    command += ["--output", _dataset_file(spec, None)]
    container = _container(FETCH_CONTAINER, image, command, resources, settings)
    container["env"].append({"name": DATASET_URL_ENV, "value": url.url})
    container["volumeMounts"].append({"name": "dataset", "mountPath": DATASET_DIR})
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"  # its one line says why
    return container


def scheduler_command(
    name: str, spec: BenchmarkSpec, dataset_key: str | None, settings: OperatorSettings,
    scrape: tuple[str, ...] = (),
) -> list[str]:  # fmt: skip
    """`scrape`: the metrics URLs of the backend pods (see `server_metrics_urls`)."""
    e, load = spec.endpoint, spec.load
    command = ["dagperf", "search" if spec.search else "scheduler"]
    command += _dataset_flags(spec, dataset_key)
    command += ["--url", e.url, "--endpoint-type", e.type]
    if e.model:
        command += ["--model", e.model]
    if e.streaming:
        command.append("--streaming")
    if e.extra_inputs:
        command += ["--extra-inputs", json.dumps(e.extra_inputs, sort_keys=True)]
    for header in e.backend_headers:
        command += ["--backend-header", header]
    for url in scrape:
        command += ["--server-metrics-url", url]
    if scrape and spec.server_metrics is not None:
        command += ["--server-metrics-interval", f"{spec.server_metrics.interval_seconds:g}"]
    if spec.dataset.tokenizer is not None:
        command += ["--tokenizer", TOKENIZER_FILE]
    command += model_flags(load_config(load))
    command += model_flags(health_options(spec.health), prefix="health-")
    verdict = spec.verdict
    if verdict.max_error_rate != DEFAULT_MAX_ERROR_RATE:
        command += ["--max-error-rate", str(verdict.max_error_rate)]
    if verdict.goodput:
        command += ["--goodput", " ".join(f"{m}:{v}" for m, v in sorted(verdict.goodput.items()))]
    if spec.results.report and spec.results.persistent_volume_claim is not None:
        command.append("--report")
    if spec.search is not None:  # one pod: its workers are local processes
        command += [*spec.search.flags(), "--workers", str(spec.workers.processes_per_pod)]
    else:
        expected = spec.workers.replicas * spec.workers.processes_per_pod
        command += ["--bind", f"tcp://0.0.0.0:{settings.zmq_port}"]
        command += ["--workers-expected", str(expected), "--registration-timeout", "600"]
    command += [
        "--keys",
        KEYS_DIR,
        "--artifact-dir",
        f"{RESULTS_DIR}/{name}",
        "--metrics-host",
        "0.0.0.0",
        "--metrics-port",
        str(settings.metrics_port),
        "--metrics-linger",
        str(settings.metrics_linger_s),
        "--summary-file",
        TERMINATION_LOG,
        "--benchmark-name",
        name,
        "--log-format",
        "json",
        "--quiet",
    ]
    return command


def scheduler_job(
    name: str, spec: BenchmarkSpec, dataset_key: str | None, settings: OperatorSettings,
    scrape: tuple[str, ...] = (),
) -> k8s.Job:  # fmt: skip
    names = Names(name)
    image = spec.image or settings.image
    resources = _resources(spec.scheduler.resources, settings.scheduler_resources)
    container = _container(
        "scheduler",
        image,
        scheduler_command(name, spec, dataset_key, settings, scrape),
        resources,
        settings,
    )
    container["ports"] = [
        {"name": "zmq", "containerPort": settings.zmq_port},
        {"name": "metrics", "containerPort": settings.metrics_port},
    ]
    inputs, volumes = _inputs(spec)
    container["volumeMounts"] += inputs
    fetch = _fetch_container(spec, image, resources, settings)
    init: k8s.PodSpecFields = {"initContainers": [fetch]} if fetch else {}
    container["volumeMounts"] += [
        {"name": "results", "mountPath": RESULTS_DIR},
        KEYS_MOUNT,
    ]
    if spec.endpoint.model is None or spec.search:  # it lists models / its workers send
        container["env"] += _api_key_env(spec)
    container["terminationMessagePath"] = TERMINATION_LOG
    container["terminationMessagePolicy"] = "File"
    container["readinessProbe"] = {
        "httpGet": {"path": "/healthz", "port": "metrics"},
        "periodSeconds": 5,
    }
    claim = results_claim_name(name, spec)
    results: k8s.Volume = (
        {"name": "results", "persistentVolumeClaim": {"claimName": claim}}
        if claim
        else {"name": "results", "emptyDir": {}}
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": names.scheduler, "labels": labels(name, "scheduler")},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels(name, "scheduler")},
                "spec": {
                    **_placement(spec.scheduler.placement),
                    "restartPolicy": "Never",
                    "securityContext": _pod_security(settings),
                    "automountServiceAccountToken": False,  # they never call the API
                    **init,
                    "containers": [container],
                    "volumes": [
                        results,
                        {"name": "scratch", "emptyDir": {}},
                        _keys_volume(name, FILES if spec.search else SCHEDULER_FILES),
                        *volumes,
                    ],
                },
            },
        },
    }


def scheduler_service(name: str, settings: OperatorSettings) -> k8s.Service:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": Names(name).scheduler, "labels": labels(name, "scheduler")},
        "spec": {
            "selector": {
                "app.kubernetes.io/instance": name,
                "app.kubernetes.io/component": "scheduler",
            },
            "ports": [
                {"name": "zmq", "port": settings.zmq_port, "targetPort": "zmq"},
                {"name": "metrics", "port": settings.metrics_port, "targetPort": "metrics"},
            ],
        },
    }


def worker_deployment(
    name: str, namespace: str, spec: BenchmarkSpec, settings: OperatorSettings
) -> k8s.Deployment:
    names = Names(name)
    address = f"tcp://{names.scheduler}.{namespace}.svc:{settings.zmq_port}"
    command = [
        "dagperf",
        "worker",
        "--scheduler",
        address,
        "--url",
        spec.endpoint.url,
        "--keys",
        KEYS_DIR,
        "--worker-id",
        "$(POD_NAME)",
        "--processes",
        str(spec.workers.processes_per_pod),
        "--log-format",
        "json",
    ]
    container = _container(
        "worker",
        spec.image or settings.image,
        command,
        _resources(spec.workers.resources, settings.worker_resources),
        settings,
    )
    container["env"].append(
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    )
    container["env"] += _api_key_env(spec)
    container["volumeMounts"].append(KEYS_MOUNT)
    selector = {"app.kubernetes.io/instance": name, "app.kubernetes.io/component": "worker"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": names.workers, "labels": labels(name, "worker")},
        "spec": {
            "replicas": spec.workers.replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels(name, "worker")},
                "spec": {
                    **_placement(spec.workers.placement),
                    "securityContext": _pod_security(settings),
                    "automountServiceAccountToken": False,  # they never call the API
                    "containers": [container],
                    "volumes": [
                        {"name": "scratch", "emptyDir": {}},
                        _keys_volume(name, WORKER_FILES),
                    ],
                    "terminationGracePeriodSeconds": 10,
                },
            },
        },
    }


def server_metrics_urls(spec: BenchmarkSpec, pods: list[dict[str, Any]]) -> tuple[str, ...]:
    """Each running backend pod's metrics URL, by its pod IP: scraped directly, not through a
    Service, so each backend is seen on its own."""
    wanted = spec.server_metrics
    if wanted is None:
        return ()
    urls = []
    for pod in pods:
        status = pod.get("status") or {}
        ip = status.get("podIP")
        if ip and status.get("phase") == "Running":
            host = f"[{ip}]" if ":" in ip else ip
            urls.append(f"http://{host}:{wanted.port}{wanted.path}")
    return tuple(sorted(urls))


def _placement(placement: Placement) -> k8s.PodSpecFields:
    out: k8s.PodSpecFields = {}
    if placement.node_selector:
        out["nodeSelector"] = dict(placement.node_selector)
    if placement.tolerations:  # the model's aliases are the pod spec's names (a test holds them)
        out["tolerations"] = [
            cast(k8s.Toleration, t.model_dump(by_alias=True, exclude_none=True))
            for t in placement.tolerations
        ]
    return out


def results_claim_name(name: str, spec: BenchmarkSpec) -> str | None:
    claim = spec.results.persistent_volume_claim
    if claim is None:
        return None
    return claim.claim_name or Names(name).claim


def results_claim(name: str, spec: BenchmarkSpec) -> k8s.PersistentVolumeClaim | None:
    """The claim to create, when the spec asks for a new one (by its size, not an existing
    claim's name)."""
    claim = spec.results.persistent_volume_claim
    if claim is None or claim.size is None:
        return None
    body: k8s.PersistentVolumeClaimSpec = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": claim.size}},
    }
    if claim.storage_class_name:
        body["storageClassName"] = claim.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": Names(name).claim, "labels": labels(name, "results")},
        "spec": body,
    }
