"""The pods a Benchmark runs, as pod specs: their containers, volumes, security and placement.

Each pod mounts only its half of the key Secret: the scheduler its key pair, the workers'
public key and the control token; the workers their key pair and the scheduler's public key.

A dataset named by a URL is fetched into the scheduler pod by an init container (the same image
and security context) into an emptyDir at DATASET_DIR, renamed there only once its SHA-256 is
right; the scheduler mounts it read-only and reads a local file.

Every pod runs as a non-root user with a read-only root filesystem (an emptyDir at /tmp for
scratch), no privilege escalation, no capabilities, the runtime's seccomp profile and no service
account token (they never call the Kubernetes API), with resource requests set. The API key
reaches workers only as an environment variable from the Secret the spec names, and the
scheduler only when it must ask the server for a model name.

What the containers run is pod_commands.py's; the objects around the pods, and the names of the
Secret and claim they mount, are manifests.py's.
"""

from __future__ import annotations

from typing import Any, cast

from dagperf.vocabulary.keys import FILES, SCHEDULER_FILES, WORKER_FILES
from dagperf_operator import kube_objects as k8s
from dagperf_operator.pod_commands import (
    DATASET_DIR,
    DATASET_URL_ENV,
    KEYS_DIR,
    RESULTS_DIR,
    TERMINATION_LOG,
    TOKENIZER_FILE,
    fetch_command,
)
from dagperf_operator.settings import OperatorSettings
from dagperf_operator.spec import BenchmarkSpec, Placement, Resources

FETCH_CONTAINER = "fetch-dataset"

CONTAINER_SECURITY: k8s.SecurityContext = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
}

KEYS_MOUNT: k8s.VolumeMount = {"name": "keys", "mountPath": KEYS_DIR, "readOnly": True}


def _pod_security(settings: OperatorSettings) -> k8s.PodSecurityContext:
    uid = settings.run_as_user
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
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


def _resources(
    spec_resources: Resources | None, default: dict[str, Any]
) -> k8s.ResourceRequirements:
    if spec_resources is None:  # the chart's value, passed on as written: the API server checks it
        return cast(k8s.ResourceRequirements, default)
    return {"requests": dict(spec_resources.requests), "limits": dict(spec_resources.limits)}


def _api_key_env(spec: BenchmarkSpec) -> list[k8s.EnvVar]:
    secret = spec.endpoint.api_key_secret_ref
    if secret is None:
        return []
    ref: k8s.EnvVarSource = {"secretKeyRef": {"name": secret.name, "key": secret.key}}
    return [{"name": "OPENAI_API_KEY", "valueFrom": ref}]


def _keys_volume(secret_name: str, files: tuple[str, ...]) -> k8s.Volume:
    items: list[k8s.KeyToPath] = [{"key": file, "path": file} for file in files]
    secret: k8s.SecretVolumeSource = {
        "secretName": secret_name,
        "items": items,
        "defaultMode": 0o440,
    }
    return {"name": "keys", "secret": secret}


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
    container = _container(FETCH_CONTAINER, image, fetch_command(spec, url), resources, settings)
    container["env"].append({"name": DATASET_URL_ENV, "value": url.url})
    container["volumeMounts"].append({"name": "dataset", "mountPath": DATASET_DIR})
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"  # its one line says why
    return container


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


def scheduler_pod(
    spec: BenchmarkSpec,
    settings: OperatorSettings,
    command: list[str],
    keys_secret: str,
    results_claim: str | None,
) -> k8s.PodSpec:
    """The scheduler's pod, running `command`; its results go to `results_claim` if one is
    named, else nowhere that outlives the pod."""
    image = spec.image or settings.image
    resources = _resources(spec.scheduler.resources, settings.scheduler_resources)
    container = _container("scheduler", image, command, resources, settings)
    container["ports"] = [
        {"name": "zmq", "containerPort": settings.zmq_port},
        {"name": "metrics", "containerPort": settings.metrics_port},
    ]
    inputs, volumes = _inputs(spec)
    container["volumeMounts"] += [
        *inputs,
        {"name": "results", "mountPath": RESULTS_DIR},
        KEYS_MOUNT,
    ]
    if spec.endpoint.model is None or spec.local_workers:  # it lists models / its workers send
        container["env"] += _api_key_env(spec)
    container["terminationMessagePath"] = TERMINATION_LOG
    container["terminationMessagePolicy"] = "File"
    container["readinessProbe"] = {
        "httpGet": {"path": "/healthz", "port": "metrics"},
        "periodSeconds": 5,
    }
    fetch = _fetch_container(spec, image, resources, settings)
    init: k8s.PodSpecFields = {"initContainers": [fetch]} if fetch else {}
    results: k8s.Volume = (
        {"name": "results", "persistentVolumeClaim": {"claimName": results_claim}}
        if results_claim
        else {"name": "results", "emptyDir": {}}
    )
    return {
        **_placement(spec.scheduler.placement),
        "restartPolicy": "Never",
        "securityContext": _pod_security(settings),
        "automountServiceAccountToken": False,  # they never call the API
        **init,
        "containers": [container],
        "volumes": [
            results,
            {"name": "scratch", "emptyDir": {}},
            _keys_volume(keys_secret, FILES if spec.local_workers else SCHEDULER_FILES),
            *volumes,
        ],
    }


def worker_pod(
    spec: BenchmarkSpec, settings: OperatorSettings, command: list[str], keys_secret: str
) -> k8s.PodSpec:
    """A worker pod, running `command`, with its pod's name in POD_NAME (its worker id)."""
    resources = _resources(spec.workers.resources, settings.worker_resources)
    container = _container("worker", spec.image or settings.image, command, resources, settings)
    container["env"].append(
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    )
    container["env"] += _api_key_env(spec)
    container["volumeMounts"].append(KEYS_MOUNT)
    return {
        **_placement(spec.workers.placement),
        "securityContext": _pod_security(settings),
        "automountServiceAccountToken": False,  # they never call the API
        "containers": [container],
        "volumes": [
            {"name": "scratch", "emptyDir": {}},
            _keys_volume(keys_secret, WORKER_FILES),
        ],
        "terminationGracePeriodSeconds": 10,
    }
