"""The kopf handlers: thin wiring from Benchmark events to the pure builders and status logic.

- create: validate the spec and the dataset (with dagperf's own loader), then create the
  results claim, the scheduler Service and Job and the worker Deployment, owned by the Benchmark.
  A bad spec or dataset ends as phase Failed with the reason in a condition and an Event, and
  nothing else is created.
- monitor (a timer while Pending or Running): progress from the scheduler's /status; the end from
  its pod's termination message; then workers scaled to zero.
- spec changes after creation are refused by a condition (they would be half-applied to a run
  in progress), except `suspend`, which stops the run gracefully and keeps its results.
- a timer deletes a finished Benchmark after `ttlSecondsAfterFinished`.

Transient API errors are retried a bounded number of times (kopf's TemporaryError, `retries`);
a create that still fails ends the Benchmark as Failed rather than retrying forever.

The handlers are registered when the operator starts (`registry`, from `run_options`), not at
import, so the settings they depend on are read then.
"""

from __future__ import annotations

import logging
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from dagperf.vocabulary.contract import RunState, StatusReport, decode_status
from dagperf.vocabulary.keys import KeySet
from dagperf.vocabulary.tokens import TokenCounter, TokenizerError
from dagperf_operator import manifests, pod_commands
from dagperf_operator import status as benchmark_status
from dagperf_operator.crd import GROUP, PLURAL, VERSION
from dagperf_operator.kube import Kube, api_client
from dagperf_operator.kube_objects import KubeObject
from dagperf_operator.preflight import check_dataset
from dagperf_operator.settings import OperatorSettings
from dagperf_operator.spec import BenchmarkSpec
from dagperf_operator.status import Condition, Phase

RETRIES = 5  # for a change handler; a timer simply tries again on its next tick


def run_options(namespaces: Sequence[str] = ()) -> dict[str, Any]:
    """How kopf runs these handlers, for `dagperf-operator` and the tests alike: every
    namespace, or exactly these (then without scanning the cluster's namespaces and CRDs, which
    a namespaced role may not read). The settings are read now (SettingsError if one is bad)."""
    poll_interval_s = OperatorSettings.from_env().poll_interval_s
    settings = kopf.OperatorSettings()
    prefix = "dagperf.io"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=prefix)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=prefix, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING  # Events for problems, not for every step
    # A Benchmark deleted while a timer runs (the TTL timer deletes its own) waits for that
    # timer to return; check often, not kopf's default of once a minute.
    settings.background.instant_exit_timeout = 2.0
    settings.background.cancellation_polling = 1.0
    settings.scanning.disabled = bool(namespaces)
    return {
        "registry": registry(poll_interval_s),
        "settings": settings,
        "clusterwide": not namespaces,
        "namespaces": list(namespaces),
        "standalone": True,  # one operator replica: no peering
    }


def startup(memo: kopf.Memo, **_: Any) -> None:
    memo.kube = Kube(api_client())
    memo.settings = OperatorSettings.from_env()


def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return kopf.login_with_service_account(**kwargs)
    return kopf.login_with_kubeconfig(**kwargs)


# --- create ----------------------------------------------------------------------------------


def create(
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    patch: kopf.Patch,
    memo: kopf.Memo,
    retry: int,
    **_: Any,
) -> None:
    assert namespace is not None  # Benchmarks are namespaced
    kube: Kube = memo.kube
    conditions: list[dict[str, Any]] = []
    patch.status["observedGeneration"] = body.metadata.get("generation")
    try:
        parsed = BenchmarkSpec.model_validate(dict(spec))
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        _fail(
            body,
            patch,
            conditions,
            Condition.SPEC_ACCEPTED,
            "InvalidSpec",
            f"spec.{where}: {first['msg']}",
        )
        return
    if parsed.suspend:
        patch.status["phase"] = Phase.SUSPENDED
        patch.status["message"] = "created suspended: nothing was launched"
        return
    try:
        dataset = check_dataset(parsed, namespace, kube)
        if dataset.reason is not None:
            _fail(body, patch, conditions, Condition.DATASET_VALID, dataset.reason, dataset.message)
            return
        if problem := _check_tokenizer(parsed, namespace, kube):
            _fail(body, patch, conditions, Condition.DATASET_VALID, "InvalidTokenizer", problem)
            return
        conditions = benchmark_status.set_condition(
            conditions, Condition.DATASET_VALID, True, "Valid", dataset.message
        )
        scrape, problem = _backend_metrics(parsed, namespace, kube)
        if problem:
            _fail(body, patch, conditions, Condition.SPEC_ACCEPTED, "NoBackendPods", problem)
            return
        _launch(body, name, namespace, parsed, dataset.key, kube, memo.settings, scrape)
    except ApiException as e:
        if retry + 1 >= RETRIES or (400 <= e.status < 500 and e.status != 429):
            _fail(
                body,
                patch,
                conditions,
                Condition.RESOURCES_CREATED,
                "ApiError",
                f"{e.status} {e.reason}: {(e.body or '')[:300]}",
            )
            return
        raise kopf.TemporaryError(f"the API said {e.status} {e.reason}", delay=5) from None
    patch.status.update(_launched(name, parsed, conditions))


def _launched(name: str, spec: BenchmarkSpec, conditions: list[dict[str, Any]]) -> dict[str, Any]:
    """The status of a Benchmark whose pods were just created."""
    conditions = benchmark_status.set_condition(
        conditions,
        Condition.RESOURCES_CREATED,
        True,
        "Created",
        "scheduler Job, Service and worker Deployment",
    )
    conditions = benchmark_status.set_condition(
        conditions, Condition.WORKERS_READY, False, "Waiting", "waiting for worker pods to register"
    )
    expected = spec.workers.replicas * spec.workers.processes_per_pod
    claim = manifests.results_claim_name(name, spec)
    return {
        "phase": Phase.PENDING,
        "message": "launched; waiting for the scheduler and workers",
        "conditions": conditions,
        "startTime": benchmark_status.now(),
        "workers": {"desired": expected, "registered": 0},
        "progress": {"requestsCompleted": 0, "errors": 0, "display": "0"},
        "resultsPath": f"{claim}:{pod_commands.RESULTS_DIR}/{name}" if claim else None,
    }


def _backend_metrics(
    spec: BenchmarkSpec, namespace: str, kube: Kube
) -> tuple[tuple[str, ...], str | None]:
    """The metrics URLs of the backend pods `spec.serverMetrics` selects, or why there are none."""
    if spec.server_metrics is None:
        return (), None
    pods = kube.pods(namespace, spec.server_metrics.selector)
    urls = pod_commands.server_metrics_urls(spec, pods)
    if urls:
        return urls, None
    labels = ",".join(f"{k}={v}" for k, v in spec.server_metrics.selector.items())
    return (), f"serverMetrics: no running pod in {namespace} has the labels {labels}"


def _check_tokenizer(spec: BenchmarkSpec, namespace: str, kube: Kube) -> str | None:
    """Why the Benchmark's tokenizer cannot be used, if it cannot (the scheduler would exit on
    it after its pods started)."""
    ref = spec.dataset.tokenizer
    if ref is None:
        return None
    files = kube.dataset_files(namespace, ref.name)
    where = f"tokenizer: configmap/{ref.name}"
    if files is None:
        return f"{where} does not exist in this namespace"
    if ref.key not in files:
        return f"{where} has no key {ref.key!r}"
    try:
        TokenCounter(files[ref.key].decode(), origin=f"configmap/{ref.name}/{ref.key}")
    except (TokenizerError, UnicodeDecodeError) as e:
        return f"{where}: {e}"
    return None


def _launch(
    body: kopf.Body,
    name: str,
    namespace: str,
    spec: BenchmarkSpec,
    key: str | None,
    kube: Kube,
    settings: OperatorSettings,
    scrape: tuple[str, ...] = (),
) -> None:
    keys = KeySet.generate(settings.control_token(body.metadata.uid or name))
    objects: list[KubeObject | None] = [
        manifests.keys_secret(name, keys.files()),
        manifests.scheduler_network_policy(name, settings) if settings.network_policy else None,
        manifests.results_claim(name, spec),
        manifests.scheduler_service(name, settings),
        manifests.scheduler_job(name, spec, key, settings, scrape),
        None
        if spec.local_workers
        else manifests.worker_deployment(name, namespace, spec, settings),
    ]
    for obj in objects:
        if obj is not None:
            kopf.adopt(obj, owner=body)  # owned: deleting the Benchmark deletes it
            kube.create(namespace, obj)


def _fail(
    body: kopf.Body,
    patch: kopf.Patch,
    conditions: list[dict[str, Any]],
    kind: str,
    reason: str,
    message: str,
) -> None:
    patch.status["phase"] = Phase.FAILED
    patch.status["message"] = message
    patch.status["conditions"] = benchmark_status.set_condition(
        conditions, kind, False, reason, message
    )
    patch.status["completionTime"] = benchmark_status.now()
    kopf.warn(body, reason=reason, message=message[:1000])


# --- monitor ---------------------------------------------------------------------------------


def _active(status: kopf.Status, **_: Any) -> bool:
    return status.get("phase") in benchmark_status.ACTIVE


def monitor(
    body: kopf.Body,
    status: kopf.Status,
    name: str,
    namespace: str | None,
    patch: kopf.Patch,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    assert namespace is not None  # Benchmarks are namespaced
    kube: Kube = memo.kube
    names = manifests.Names(name)
    job = kube.job(namespace, names.scheduler)
    pods = kube.pods(
        namespace, {"app.kubernetes.io/instance": name, "app.kubernetes.io/component": "scheduler"}
    )
    end = benchmark_status.finished(pods[-1] if pods else None, job)
    conditions = list(status.get("conditions") or [])
    if end is None and job is None:
        deleted = "the scheduler Job was deleted"
        end = benchmark_status.End(Phase.FAILED, "SchedulerMissing", deleted)
    if end is None:
        report = _scheduler_status(memo.settings, name, namespace)
        if report is None:
            return
        patch.status.update(benchmark_status.from_scheduler(report))
        workers = report.workers
        if workers.registered >= workers.desired:
            conditions = benchmark_status.set_condition(
                conditions,
                Condition.WORKERS_READY,
                True,
                "Registered",
                f"{workers.registered} worker(s) registered",
            )
            patch.status["conditions"] = conditions
        if report.state is RunState.RUNNING and status.get("phase") != Phase.RUNNING:
            patch.status["phase"] = Phase.RUNNING
            patch.status["message"] = "running"
        return
    if end.final is not None:
        patch.status.update(benchmark_status.from_scheduler(end.final))
    done = end.phase in (Phase.SUCCEEDED, Phase.SUSPENDED)
    patch.status["conditions"] = benchmark_status.set_condition(
        conditions, Condition.COMPLETED, done, end.reason, end.message
    )
    patch.status["phase"] = end.phase
    patch.status["message"] = end.message
    patch.status["completionTime"] = benchmark_status.now()
    kube.scale_workers(namespace, names.workers, 0)
    if end.phase is Phase.FAILED:
        kopf.warn(body, reason=end.reason, message=end.message)


def _scheduler_url(settings: OperatorSettings, name: str, namespace: str, path: str) -> str:
    service = manifests.Names(name).scheduler
    base = settings.status_url.format(
        service=service, namespace=namespace, port=settings.metrics_port
    )
    return base + path


def _scheduler_status(settings: OperatorSettings, name: str, namespace: str) -> StatusReport | None:
    try:
        url = _scheduler_url(settings, name, namespace, "/status")
        with urllib.request.urlopen(url, timeout=3) as response:
            return decode_status(response.read())
    except (urllib.error.URLError, OSError):
        return None  # not up yet, or going away: the pod's state will tell


# --- changes ---------------------------------------------------------------------------------


def spec_changed(
    body: kopf.Body,
    diff: kopf.Diff,
    status: kopf.Status,
    name: str,
    namespace: str | None,
    patch: kopf.Patch,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    assert namespace is not None  # Benchmarks are namespaced
    paths = {tuple(p[1:] if p[:1] == ("spec",) else p) for _, p, _, _ in diff}
    refused = sorted(".".join(p) for p in paths if p != ("suspend",))
    conditions = list(status.get("conditions") or [])
    if refused:
        message = (
            f"changes to spec.{', spec.'.join(refused)} were not applied: a Benchmark's spec is "
            "fixed once it is created; delete it and create a new one"
        )
        conditions = benchmark_status.set_condition(
            conditions, Condition.SPEC_ACCEPTED, False, "SpecImmutable", message
        )
        patch.status["conditions"] = conditions
        kopf.warn(body, reason="SpecImmutable", message=message)
    if ("suspend",) in paths:
        _suspend_changed(body, status, name, namespace, patch, memo, conditions)


def _suspend_changed(
    body: kopf.Body,
    status: kopf.Status,
    name: str,
    namespace: str,
    patch: kopf.Patch,
    memo: kopf.Memo,
    conditions: list[dict[str, Any]],
) -> None:
    settings: OperatorSettings = memo.settings
    phase = status.get("phase")
    if not body["spec"].get("suspend"):
        if phase == Phase.SUSPENDED:
            message = "a suspended Benchmark does not resume; create a new one"
            patch.status["conditions"] = benchmark_status.set_condition(
                conditions, Condition.SPEC_ACCEPTED, False, "CannotResume", message
            )
        return
    if phase not in benchmark_status.ACTIVE:
        return
    names = manifests.Names(name)
    url = _scheduler_url(settings, name, namespace, "/stop")
    token = settings.control_token(body.metadata.uid or name)
    request = urllib.request.Request(
        url, method="POST", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        urllib.request.urlopen(request, timeout=3).close()
        patch.status["message"] = "suspending: the scheduler is stopping and writing its results"
        return
    except urllib.error.HTTPError as e:  # 401: launched under another control key
        message = f"the scheduler refused the stop ({e.code}): stopped without its results"
    except (urllib.error.URLError, OSError):
        message = "suspended before the scheduler ran"
    memo.kube.delete_job(namespace, names.scheduler)  # nothing to keep, or no way to: just stop
    memo.kube.scale_workers(namespace, names.workers, 0)
    patch.status.update(
        {
            "phase": Phase.SUSPENDED,
            "message": message,
            "completionTime": benchmark_status.now(),
            "conditions": benchmark_status.set_condition(
                conditions, Condition.COMPLETED, True, "Suspended", message
            ),
        }
    )


# --- expiry ----------------------------------------------------------------------------------


def _expiring(spec: kopf.Spec, status: kopf.Status, **_: Any) -> bool:
    return (
        status.get("phase") in benchmark_status.TERMINAL_PHASES
        and spec.get("ttlSecondsAfterFinished") is not None
    )


def expire(
    spec: kopf.Spec,
    status: kopf.Status,
    name: str,
    namespace: str | None,
    memo: kopf.Memo,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **_: Any,
) -> None:
    assert namespace is not None  # Benchmarks are namespaced
    ttl = spec["ttlSecondsAfterFinished"]
    if benchmark_status.expired(status.get("completionTime"), ttl, datetime.now(UTC)):
        logger.info("finished over %d s ago: deleting (ttlSecondsAfterFinished)", ttl)
        memo.kube.delete_benchmark(namespace, name)


def registry(poll_interval_s: float) -> kopf.OperatorRegistry:
    """Every handler above, registered with kopf; the timers poll at this interval, and again
    this often after an error (not kopf's default minute)."""
    handlers = kopf.OperatorRegistry()
    kopf.on.startup(registry=handlers)(startup)
    kopf.on.login(registry=handlers)(login)
    changes: dict[str, Any] = {"retries": RETRIES, "backoff": 5, "registry": handlers}
    kopf.on.create(GROUP, VERSION, PLURAL, **changes)(create)
    kopf.on.update(GROUP, VERSION, PLURAL, field="spec", **changes)(spec_changed)
    polling: dict[str, Any] = {"interval": poll_interval_s, "backoff": poll_interval_s}
    kopf.timer(GROUP, VERSION, PLURAL, when=_active, registry=handlers, **polling)(monitor)
    kopf.timer(GROUP, VERSION, PLURAL, when=_expiring, registry=handlers, **polling)(expire)
    return handlers
