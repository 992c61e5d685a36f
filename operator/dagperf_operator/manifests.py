"""What a Benchmark becomes: pure functions from its spec to the Kubernetes objects it launches.

A scheduler Job (one pod, no retries: a benchmark run is not idempotent), a Service for its
ZeroMQ and metrics ports, a worker Deployment, the results claim when one is to be created, the
Secret with the run's CURVE keys and control token, and a NetworkPolicy that admits only the
Benchmark's worker pods to the scheduler's ZeroMQ port (its metrics port stays open to
Prometheus and the operator; POST /stop there needs the control token). The handlers add owner
references (so deleting the Benchmark deletes them) and create them.

Every object is named after its Benchmark (`Names`), so a retried or resumed handler finds what
it made before. The pods inside the Job and the Deployment are pod_specs.py's, and what they
run pod_commands.py's; the objects' types, which mypy checks these against, kube_objects.py's.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from dagperf_operator import kube_objects as k8s
from dagperf_operator.pod_commands import scheduler_command, worker_command
from dagperf_operator.pod_specs import scheduler_pod, worker_pod
from dagperf_operator.settings import OperatorSettings
from dagperf_operator.spec import BenchmarkSpec


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


def keys_secret(name: str, files: dict[str, str]) -> k8s.Secret:
    """The run's key set (`dagperf.vocabulary.keys.KeySet.files()`), as a Secret."""
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


def scheduler_job(
    name: str,
    spec: BenchmarkSpec,
    dataset_key: str | None,
    settings: OperatorSettings,
    scrape: tuple[str, ...] = (),
) -> k8s.Job:
    """`scrape`: the metrics URLs of the backend pods (see `server_metrics_urls`)."""
    command = scheduler_command(name, spec, dataset_key, settings, scrape)
    pod = scheduler_pod(spec, settings, command, Names(name).keys, results_claim_name(name, spec))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": Names(name).scheduler, "labels": labels(name, "scheduler")},
        "spec": {
            "backoffLimit": 0,
            "template": {"metadata": {"labels": labels(name, "scheduler")}, "spec": pod},
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
            # The workers are the scheduler's only callers and ZeroMQ retries a refused connect
            # every 100 ms: routed from the pod's first moment, they register as soon as it
            # listens, rather than after its readiness probe's next period and the endpoints'
            # propagation to kube-proxy (10 s of a 15 s Benchmark on the real test node).
            "publishNotReadyAddresses": True,
        },
    }


def worker_deployment(
    name: str, namespace: str, spec: BenchmarkSpec, settings: OperatorSettings
) -> k8s.Deployment:
    names = Names(name)
    address = f"tcp://{names.scheduler}.{namespace}.svc:{settings.zmq_port}"
    pod = worker_pod(spec, settings, worker_command(spec, address), names.keys)
    selector = {"app.kubernetes.io/instance": name, "app.kubernetes.io/component": "worker"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": names.workers, "labels": labels(name, "worker")},
        "spec": {
            "replicas": spec.workers.replicas,
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": labels(name, "worker")}, "spec": pod},
        },
    }


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
