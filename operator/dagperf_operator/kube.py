"""Every Kubernetes API call the operator makes (besides kopf's own), in one place.

The operator's RBAC rules (`operator/rbac.yaml`) grant exactly these calls plus kopf's watch and
patch of Benchmarks and its Events; a test runs the operator against an API emulator and checks
that the requests it saw match the rules. Objects come back as the API server's JSON, not the
client's models: those reject fields a server leaves out, and only a few fields are read here.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import kubernetes
from kubernetes.client import (
    ApiClient,
    AppsV1Api,
    BatchV1Api,
    CoreV1Api,
    CustomObjectsApi,
    NetworkingV1Api,
)
from kubernetes.client.exceptions import ApiException

from dagperf_operator.crd import GROUP, PLURAL, VERSION
from dagperf_operator.kube_objects import KubeObject


def api_client() -> ApiClient:
    """A client for the cluster the operator runs in, or for $KUBECONFIG (read now, not at
    import, so a test can point it anywhere)."""
    configuration = kubernetes.client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        kubernetes.config.load_incluster_config(client_configuration=configuration)
    else:
        kubernetes.config.load_kube_config(
            config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration
        )
    return ApiClient(configuration)


class Kube:
    def __init__(self, client: ApiClient):
        self.core = CoreV1Api(client)
        self.batch = BatchV1Api(client)
        self.apps = AppsV1Api(client)
        self.custom = CustomObjectsApi(client)
        self.networking = NetworkingV1Api(client)

    def claim_exists(self, namespace: str, name: str) -> bool:
        try:
            self.core.read_namespaced_persistent_volume_claim(name, namespace)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True

    def dataset_files(self, namespace: str, name: str) -> dict[str, bytes] | None:
        """A ConfigMap's files (data and binaryData); None when there is no such ConfigMap."""
        try:
            config_map = self.core.read_namespaced_config_map(name, namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        files = {k: v.encode() for k, v in (config_map.data or {}).items()}
        files |= {k: base64.b64decode(v) for k, v in (config_map.binary_data or {}).items()}
        return files

    def create(self, namespace: str, body: KubeObject) -> bool:
        """Create an object; False when it already exists (a retried or resumed handler)."""
        kind = body["kind"]
        call: Any = {
            "Job": self.batch.create_namespaced_job,
            "Deployment": self.apps.create_namespaced_deployment,
            "Service": self.core.create_namespaced_service,
            "PersistentVolumeClaim": self.core.create_namespaced_persistent_volume_claim,
            "Secret": self.core.create_namespaced_secret,
            "NetworkPolicy": self.networking.create_namespaced_network_policy,
        }[kind]
        try:
            call(namespace, body)
        except ApiException as e:
            if e.status == 409:
                return False
            raise
        return True

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return _json(self.batch.read_namespaced_job(name, namespace, _preload_content=False))
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def pods(self, namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        found = _json(
            self.core.list_namespaced_pod(
                namespace, label_selector=selector, _preload_content=False
            )
        )
        return [  # filtered here too: selectors are a server feature some test servers lack
            pod
            for pod in found.get("items") or []
            if all(
                ((pod.get("metadata") or {}).get("labels") or {}).get(k) == v
                for k, v in labels.items()
            )
        ]

    def scale_workers(self, namespace: str, name: str, replicas: int) -> None:
        try:
            self.apps.patch_namespaced_deployment(name, namespace, {"spec": {"replicas": replicas}})
        except ApiException as e:
            if e.status != 404:
                raise

    def delete_job(self, namespace: str, name: str) -> None:
        try:
            self.batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
        except ApiException as e:
            if e.status != 404:
                raise

    def delete_benchmark(self, namespace: str, name: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as e:
            if e.status != 404:
                raise


def _json(response: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(response.data)
    return data
