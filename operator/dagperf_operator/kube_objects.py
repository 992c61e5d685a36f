"""The Kubernetes objects the operator writes, as TypedDicts: what mypy checks manifests against.

Objects go to the API server as the JSON they are (see kube.py), so their types describe that
JSON rather than being the kubernetes client's model classes: a misspelt or misplaced key in a
manifest is a type error, and the object stays a plain dict that kopf can adopt.

Only the fields the operator writes are declared, named as Kubernetes spells them. A field is
required where the API server requires it to create the object (a container's name, a pod's
containers, a Job's template, every object's apiVersion, kind and metadata), optional otherwise.
What the API server sends back (pods, Jobs) is read as loose JSON where it is read: those
objects are the server's to fill, and only a few of their fields are looked at.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

Quantity = int | str  # a Kubernetes resource quantity: 2, "500m", "1Gi"
IntOrString = int | str  # a port by number or by its container port's name
PortProtocol = Literal["TCP", "UDP", "SCTP"]


class ObjectMeta(TypedDict, total=False):
    name: str
    labels: dict[str, str]


class LabelSelector(TypedDict, total=False):
    matchLabels: dict[str, str]


# --- containers ------------------------------------------------------------------------------


class ObjectFieldSelector(TypedDict):
    fieldPath: str


class SecretKeySelector(TypedDict):
    key: str
    name: NotRequired[str]


class EnvVarSource(TypedDict, total=False):
    fieldRef: ObjectFieldSelector
    secretKeyRef: SecretKeySelector


class EnvVar(TypedDict):
    name: str
    value: NotRequired[str]
    valueFrom: NotRequired[EnvVarSource]


class VolumeMount(TypedDict):
    name: str
    mountPath: str
    readOnly: NotRequired[bool]


class ContainerPort(TypedDict):
    containerPort: int
    name: NotRequired[str]


class ResourceRequirements(TypedDict, total=False):
    requests: dict[str, Quantity]
    limits: dict[str, Quantity]


class Capabilities(TypedDict, total=False):
    drop: list[str]


class SecurityContext(TypedDict, total=False):
    allowPrivilegeEscalation: bool
    readOnlyRootFilesystem: bool
    runAsNonRoot: bool
    capabilities: Capabilities


class HTTPGetAction(TypedDict):
    port: IntOrString
    path: NotRequired[str]


class Probe(TypedDict, total=False):
    httpGet: HTTPGetAction
    periodSeconds: int


class Container(TypedDict):
    name: str
    image: NotRequired[str]
    imagePullPolicy: NotRequired[str]
    command: NotRequired[list[str]]
    env: NotRequired[list[EnvVar]]
    ports: NotRequired[list[ContainerPort]]
    resources: NotRequired[ResourceRequirements]
    securityContext: NotRequired[SecurityContext]
    volumeMounts: NotRequired[list[VolumeMount]]
    readinessProbe: NotRequired[Probe]
    terminationMessagePath: NotRequired[str]
    terminationMessagePolicy: NotRequired[Literal["File", "FallbackToLogsOnError"]]


# --- volumes ---------------------------------------------------------------------------------


class KeyToPath(TypedDict):
    key: str
    path: str


class SecretVolumeSource(TypedDict, total=False):
    secretName: str
    items: list[KeyToPath]
    defaultMode: int


class ConfigMapVolumeSource(TypedDict, total=False):
    name: str
    items: list[KeyToPath]


class EmptyDirVolumeSource(TypedDict, total=False):
    sizeLimit: Quantity


class PersistentVolumeClaimVolumeSource(TypedDict):
    claimName: str
    readOnly: NotRequired[bool]


class Volume(TypedDict):
    name: str
    secret: NotRequired[SecretVolumeSource]
    configMap: NotRequired[ConfigMapVolumeSource]
    emptyDir: NotRequired[EmptyDirVolumeSource]
    persistentVolumeClaim: NotRequired[PersistentVolumeClaimVolumeSource]


# --- pods ------------------------------------------------------------------------------------


class Toleration(TypedDict, total=False):
    key: str
    operator: Literal["Equal", "Exists"]
    value: str
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
    tolerationSeconds: int


class SeccompProfile(TypedDict):
    type: Literal["RuntimeDefault", "Localhost", "Unconfined"]


class PodSecurityContext(TypedDict, total=False):
    runAsNonRoot: bool
    runAsUser: int
    runAsGroup: int
    fsGroup: int
    seccompProfile: SeccompProfile


class PodSpecFields(TypedDict, total=False):
    """Any of a pod spec's fields but its containers: the type of a part of a pod spec built on
    its own (where it runs, its init containers), spread into a PodSpec. mypy lets a part be
    spread only when its type declares every optional field: a narrower one could carry any of
    the others, of any type."""

    nodeSelector: dict[str, str]
    tolerations: list[Toleration]
    restartPolicy: Literal["Always", "OnFailure", "Never"]
    securityContext: PodSecurityContext
    automountServiceAccountToken: bool
    initContainers: list[Container]
    volumes: list[Volume]
    terminationGracePeriodSeconds: int


class PodSpec(PodSpecFields):
    containers: list[Container]


class PodTemplateSpec(TypedDict, total=False):
    metadata: ObjectMeta
    spec: PodSpec


# --- the objects a Benchmark launches --------------------------------------------------------


class JobSpec(TypedDict):
    template: PodTemplateSpec
    backoffLimit: NotRequired[int]


class Job(TypedDict):
    apiVersion: Literal["batch/v1"]
    kind: Literal["Job"]
    metadata: ObjectMeta
    spec: JobSpec


class DeploymentSpec(TypedDict):
    selector: LabelSelector
    template: PodTemplateSpec
    replicas: NotRequired[int]


class Deployment(TypedDict):
    apiVersion: Literal["apps/v1"]
    kind: Literal["Deployment"]
    metadata: ObjectMeta
    spec: DeploymentSpec


class ServicePort(TypedDict):
    port: int
    name: NotRequired[str]
    targetPort: NotRequired[IntOrString]


class ServiceSpec(TypedDict, total=False):
    selector: dict[str, str]
    ports: list[ServicePort]
    publishNotReadyAddresses: bool


class Service(TypedDict):
    apiVersion: Literal["v1"]
    kind: Literal["Service"]
    metadata: ObjectMeta
    spec: ServiceSpec


class Secret(TypedDict):
    apiVersion: Literal["v1"]
    kind: Literal["Secret"]
    metadata: ObjectMeta
    type: NotRequired[str]
    data: NotRequired[dict[str, str]]  # base64


class NetworkPolicyPort(TypedDict, total=False):
    protocol: PortProtocol
    port: IntOrString


class NetworkPolicyPeer(TypedDict, total=False):
    podSelector: LabelSelector


# `from` is a Python keyword: only the functional syntax can name it.
NetworkPolicyIngressRule = TypedDict(
    "NetworkPolicyIngressRule",
    {"from": list[NetworkPolicyPeer], "ports": list[NetworkPolicyPort]},
    total=False,
)


class NetworkPolicySpec(TypedDict):
    podSelector: LabelSelector
    policyTypes: NotRequired[list[Literal["Ingress", "Egress"]]]
    ingress: NotRequired[list[NetworkPolicyIngressRule]]


class NetworkPolicy(TypedDict):
    apiVersion: Literal["networking.k8s.io/v1"]
    kind: Literal["NetworkPolicy"]
    metadata: ObjectMeta
    spec: NetworkPolicySpec


class VolumeResourceRequirements(TypedDict, total=False):
    requests: dict[str, Quantity]


class PersistentVolumeClaimSpec(TypedDict, total=False):
    accessModes: list[Literal["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"]]
    resources: VolumeResourceRequirements
    storageClassName: str


class PersistentVolumeClaim(TypedDict):
    apiVersion: Literal["v1"]
    kind: Literal["PersistentVolumeClaim"]
    metadata: ObjectMeta
    spec: PersistentVolumeClaimSpec


KubeObject = Job | Deployment | Service | Secret | NetworkPolicy | PersistentVolumeClaim
