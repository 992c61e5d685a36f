"""What users apply and run: the CRD, the example Benchmark, kubectl against them, the
`dagperf-operator` command's refusals, and the status rules the handlers rely on."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import shutil
import signal
import subprocess
import sys
from datetime import UTC, datetime

import aiohttp
import jsonschema
import kubernetes_validate
import pytest
import yaml
from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from dagperf.dataset.formats.dag_jsonl import load_dag_jsonl
from dagperf.vocabulary.keys import KeySet
from dagperf_operator import manifests, pod_commands
from dagperf_operator import status as st
from dagperf_operator.crd import crd_yaml
from dagperf_operator.settings import OperatorSettings
from dagperf_operator.spec import BenchmarkSpec

from emulator import CRD_FILE, ROOT, Api, operating, serving_cluster, write_kubeconfig
from runs import free_port

EXAMPLE = ROOT / "examples" / "benchmark.yaml"
CRD = yaml.safe_load(CRD_FILE.read_text())
(VERSION,) = CRD["spec"]["versions"]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]
# OpenAPI v3 states exclusiveMinimum as a boolean, as JSON Schema draft 4 does.
VALIDATOR = jsonschema.Draft4Validator(SCHEMA)


def example() -> tuple[dict, dict]:
    config_map, benchmark = yaml.safe_load_all(EXAMPLE.read_text())
    return config_map, benchmark


def test_the_committed_crd_is_the_one_the_models_generate():
    assert CRD_FILE.read_text() == crd_yaml(), "run: python -m dagperf_operator.crd > " + str(
        CRD_FILE.relative_to(ROOT)
    )


def test_the_crd_is_structural_and_declares_its_status():
    def walk(node: dict, path: str) -> None:
        assert node.get("type") or node.get("x-kubernetes-int-or-string"), path
        for name in node.get("required", []):
            assert name in node["properties"], f"{path}.{name}"
        for name, child in node.get("properties", {}).items():
            # `kubectl explain` shows these; only the standard top-level fields go without
            assert path == "" or child.get("description"), f"{path}.{name} is not described"
            walk(child, f"{path}.{name}")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.*")
        if "items" in node:
            walk(node["items"], f"{path}[]")

    walk(SCHEMA, "")
    assert CRD["spec"]["names"]["shortNames"] == ["bench"]
    assert VERSION["subresources"] == {"status": {}}
    status = SCHEMA["properties"]["status"]["properties"]
    for field in ("phase", "conditions", "observedGeneration", "startTime", "completionTime",
                  "workers", "progress", "branchStats", "summary", "resultsPath",
                  "search"):  # fmt: skip
        assert field in status, field
    for column in VERSION["additionalPrinterColumns"]:  # each shows a declared field
        node = SCHEMA
        for part in column["jsonPath"].strip(".").split("."):
            if part == "metadata":
                break
            node = node["properties"][part]
    assert [c["name"] for c in VERSION["additionalPrinterColumns"]] == [
        "Phase", "Progress", "Req/s", "TTFT p99", "Best", "Age"
    ]  # fmt: skip


def test_the_example_is_valid_by_the_crd_the_operator_and_the_loader(tmp_path):
    config_map, benchmark = example()
    VALIDATOR.validate(benchmark)
    BenchmarkSpec.model_validate(benchmark["spec"])
    assert benchmark["spec"]["dataset"]["configMapRef"]["name"] == config_map["metadata"]["name"]
    ((key, content),) = config_map["data"].items()
    assert content == (ROOT / "examples" / "dag_jsonl" / key).read_text()
    (tmp_path / key).write_text(content)
    assert load_dag_jsonl(tmp_path / key).roots == ["root"]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("load", "concurrency"), 0),
        (("load", "requestRate"), 0),  # must be above zero
        (("endpoint", "type"), "embeddings"),
        (("workers", "replicas"), 0),
        (("ttlSecondsAfterFinished",), -1),
        (("endpoint", "streaming"), "yes"),
    ],
)
def test_the_crd_refuses_what_the_operator_would(path, value):
    _, benchmark = example()
    bad = copy.deepcopy(benchmark)
    node = bad["spec"]
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value
    assert not VALIDATOR.is_valid(bad)
    with pytest.raises(ValueError):
        BenchmarkSpec.model_validate(bad["spec"])


def test_a_benchmark_without_an_endpoint_url_is_refused():
    _, benchmark = example()
    del benchmark["spec"]["endpoint"]["url"]
    assert not VALIDATOR.is_valid(benchmark)


KUBECTL = shutil.which("kubectl")


async def test_kubectl_applies_the_crd_and_the_example_and_the_operator_launches_it(
    tmp_path, monkeypatch
):
    assert KUBECTL, "kubectl is not installed (tests/run.sh installs it)"
    async with operating(tmp_path, monkeypatch) as (_, api, _):
        for manifest in (CRD_FILE, EXAMPLE):
            process = await asyncio.create_subprocess_exec(
                KUBECTL, "--cache-dir", str(tmp_path / "kube-cache"), "apply",
                "--validate=false", "-f", str(manifest),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
            out, err = await process.communicate()
            assert process.returncode == 0, err.decode()
        assert "benchmark.dagperf.io/example created" in out.decode()
        b = await api.until("default", "example", lambda b: b.get("status", {}).get("phase"))
        assert b["status"]["phase"] == "Pending", b["status"]
        job = await api.get("/apis/batch/v1/namespaces/default/jobs/example-scheduler")
        (container,) = job["spec"]["template"]["spec"]["containers"]
        assert "/dataset/example.dag.jsonl" in container["command"]


async def test_the_operator_command_runs_a_benchmark_and_stops_on_sigterm(tmp_path):
    """`dagperf-operator` as users start it: kopf's runner in the main thread, a liveness probe,
    one namespace watched, and a clean exit on SIGTERM."""
    port = free_port()
    async with serving_cluster() as (_, url), aiohttp.ClientSession() as session:
        api = Api(session, url)
        env = os.environ | {"KUBECONFIG": str(write_kubeconfig(tmp_path / "kubeconfig", url))}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        operator = await asyncio.create_subprocess_exec(
            shutil.which("dagperf-operator") or "dagperf-operator", "--namespace", "default",
            "--liveness", f"http://127.0.0.1:{port}/healthz", env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            config_map, benchmark = example()
            await api.create("/api/v1/namespaces/default/configmaps", config_map)
            await api.create("/apis/dagperf.io/v1alpha1/namespaces/default/benchmarks", benchmark)
            b = await api.until("default", "example", lambda b: b.get("status"), timeout=60)
            assert b["status"]["phase"] == "Pending"
            async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                assert response.status == 200
        finally:
            operator.send_signal(signal.SIGTERM)
            output, _ = await asyncio.wait_for(operator.communicate(), 30)
    assert operator.returncode == 0, output.decode()
    assert "Traceback" not in output.decode()


@pytest.mark.parametrize(
    ("env", "complaint"),
    [
        ({"DAGPERF_ZMQ_PORT": "many"}, "DAGPERF_ZMQ_PORT='many' is not a valid int"),
        ({"DAGPERF_WORKER_RESOURCES": "{cpu"}, "DAGPERF_WORKER_RESOURCES='{cpu' is not a valid"),
        ({"KUBECONFIG": "/nonexistent/kubeconfig"}, "no cluster to talk to"),
    ],
)
def test_the_operator_command_refuses_bad_settings_with_a_message(tmp_path, env, complaint):
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)} | env
    result = subprocess.run(
        [sys.executable, "-m", "dagperf_operator"], env=environment, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert complaint in result.stderr and "Traceback" not in result.stderr


def test_a_condition_keeps_its_transition_time_until_its_status_changes(monkeypatch):
    monkeypatch.setattr(st, "now", lambda: "T1")
    conditions = st.set_condition([], "WorkersReady", False, "Waiting")
    monkeypatch.setattr(st, "now", lambda: "T2")
    conditions = st.set_condition(conditions, "WorkersReady", False, "Waiting", "1 of 2")
    assert conditions[0]["lastTransitionTime"] == "T1" and conditions[0]["message"] == "1 of 2"
    conditions = st.set_condition(conditions, "WorkersReady", True, "Registered")
    assert [(c["status"], c["lastTransitionTime"]) for c in conditions] == [("True", "T2")]


def test_a_job_that_failed_before_its_pod_reported_fails_the_benchmark():
    job = {"status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    assert st.finished(None, job).reason == "SchedulerFailed"
    assert st.finished(None, {"status": {}}) is None  # still running


def test_a_pod_that_failed_before_its_scheduler_started_says_why():
    job = {"status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    said = "dagperf fetch: https://x.invalid/d: the server answered HTTP 403 Forbidden"
    init = {"name": "fetch-dataset", "state": {"terminated": {"exitCode": 1, "message": said}}}
    waiting = [{"name": "scheduler", "state": {"waiting": {"reason": "PodInitializing"}}}]
    pod = {"status": {"phase": "Failed", "initContainerStatuses": [init],
                      "containerStatuses": waiting}}  # fmt: skip
    end = st.finished(pod, job)
    assert (end.phase, end.reason) == (st.Phase.FAILED, "InitContainerFailed")
    assert end.message == f"init container fetch-dataset exited with code 1: {said}"
    init["state"] = {"terminated": {"exitCode": 0}}
    pod["status"]["phase"] = "Pending"
    assert st.finished(pod, {"status": {}}) is None  # fetched; the scheduler is starting
    evicted = 'Usage of EmptyDir volume "dataset" exceeds the limit "1Gi". '
    pod["status"] |= {"phase": "Failed", "reason": "Evicted", "message": evicted}
    killed = {"terminated": {"exitCode": 137, "reason": "Error"}}
    pod["status"]["containerStatuses"] = [{"name": "scheduler", "state": killed}]
    end = st.finished(pod, job)
    assert (end.reason, end.message) == (
        "Evicted",
        f"the scheduler pod was evicted: {evicted.strip()}",
    )


@pytest.mark.parametrize(
    ("finished", "ttl", "expired"),
    [
        ("2026-01-01T00:00:00Z", 3600, False),  # 3599 s after
        ("2026-01-01T00:00:00Z", 3599, True),
        ("2026-01-01T00:59:59Z", 0, True),
        (None, 0, False),  # not finished: nothing to count from
    ],
)
def test_a_benchmark_expires_exactly_its_ttl_after_it_finished(finished, ttl, expired):
    now = datetime(2026, 1, 1, 0, 59, 59, tzinfo=UTC)
    assert st.expired(finished, ttl, now) is expired


def test_the_poll_interval_is_read_when_the_operator_starts_not_at_import(monkeypatch):
    from dagperf_operator import handlers

    intervals = []
    for value in ("0.25", "7"):
        monkeypatch.setenv("DAGPERF_POLL_INTERVAL_S", value)
        registry = handlers.run_options()["registry"]
        timers = registry._spawning.get_all_handlers()  # kopf's own record of the timers
        intervals.append(sorted((t.id, t.interval, t.backoff) for t in timers))
    assert intervals == [
        [("expire", 0.25, 0.25), ("monitor", 0.25, 0.25)],
        [("expire", 7.0, 7.0), ("monitor", 7.0, 7.0)],
    ]


def test_dataset_problems_are_quoted_first_few_then_counted():
    problems = [f"line {n}: bad" for n in range(1, 9)]
    message = st.dataset_problems_message(problems)
    assert message.startswith("line 1: bad; line 2: bad") and message.endswith("and 3 more")


@pytest.mark.parametrize("version", sorted({"1.29.0", kubernetes_validate.utils.latest_version()}))
def test_everything_a_benchmark_launches_is_valid_kubernetes(version):
    """The Job, Deployment, Service, claim, key Secret and NetworkPolicy the operator makes of
    the example Benchmark, checked against the API's own schemas (strict: no unknown field)."""
    _, benchmark = example()
    spec = BenchmarkSpec.model_validate(benchmark["spec"])
    spec = spec.model_copy(update={"results": spec.results.model_validate(
        {"persistentVolumeClaim": {"size": "1Gi"}}
    )})  # fmt: skip
    settings = OperatorSettings()
    objects = [
        manifests.keys_secret("demo", KeySet.generate(settings.control_token("u")).files()),
        manifests.scheduler_network_policy("demo", settings),
        manifests.results_claim("demo", spec),
        manifests.scheduler_service("demo", settings),
        manifests.scheduler_job("demo", spec, "data.jsonl", settings),
        manifests.worker_deployment("demo", "default", spec, settings),
    ]
    assert all(objects)
    for document in objects:
        kubernetes_validate.validate(document, version, strict=True)


def test_placement_reaches_the_pods_as_kubernetes_spells_it():
    """Tolerations go from the Benchmark's models to the pod spec by their aliases, which mypy
    does not check against the pod spec's field names: the API's strict schema does."""
    _, benchmark = example()
    toleration = {
        "key": "dedicated",
        "operator": "Equal",
        "value": "bench",
        "effect": "NoExecute",
        "tolerationSeconds": 30,
    }
    placement = {"nodeSelector": {"pool": "bench"}, "tolerations": [toleration]}
    benchmark["spec"]["workers"]["placement"] = placement
    benchmark["spec"]["scheduler"] = {"placement": placement}
    spec = BenchmarkSpec.model_validate(benchmark["spec"])
    settings = OperatorSettings()
    job = manifests.scheduler_job("demo", spec, "data.jsonl", settings)
    deployment = manifests.worker_deployment("demo", "default", spec, settings)
    for document in (job, deployment):
        assert document["spec"]["template"]["spec"]["tolerations"] == [toleration]
        latest = kubernetes_validate.utils.latest_version()
        kubernetes_validate.validate(document, latest, strict=True)


# Every load option of the CLI, with a value unlike its default, as a Benchmark writes it.
LOAD_SAMPLES = {
    "concurrency": 3, "request_rate": 2.5, "fixed_schedule": False, "request_count": 70,
    "num_conversations": 5, "benchmark_duration": 12.5, "benchmark_grace_period": 4.0,
    "warmup_request_count": 2, "max_inflight": 9, "fail_fast": True, "random_seed": 42,
    "arrival_cv": 1.5, "concurrency_ramp_up": 2.0, "cancel_session_on_failure": True,
}  # fmt: skip


HEALTH_SAMPLES = {
    "arrival_slack_ms": 75.0, "early_tolerance_ms": 3.0, "rate_tolerance": 0.2,
    "osl_tolerance_pct": 7.0, "osl_tolerance_max_tokens": 9,
}  # fmt: skip


# Every other option a Benchmark can say, with a value unlike its default, by section.
SAMPLES = {
    "load": LOAD_SAMPLES,
    "health": HEALTH_SAMPLES,
    "endpoint": {
        "url": "http://llm:8000", "model": "m", "endpoint_type": "completions",
        "endpoint": "/v2/complete", "streaming": False, "extra_inputs": {"top_k": 5, "x": "y"},
        "request_timeout_seconds": 1800.0, "session_affinity_headers": ["X-Routing-Key"],
        "backend_headers": ["X-Backend", "X-Pod"],
    },
    "dataset": {"custom_dataset_type": "multi_turn", "use_think_time_only": True},
    "verdict": {"max_error_rate": 0.2, "goodput": {"time_to_first_token": 200.0,
                                                   "output_token_throughput_per_user": 30.0}},
    "runs": {"num_profile_runs": 3, "confidence_level": 0.9, "slice_duration": 2.5},
    "server_metrics": {"server_metrics_interval": 5.0},
    "output": {"report": False},
}  # fmt: skip


def _as_benchmark(section: str, values: dict) -> dict:
    """Sample options as a Benchmark writes them: its names for the fields, in camelCase."""
    from dagperf.options import CONCERNS
    from dagperf.vocabulary.options import option

    fields = CONCERNS[section].model.model_fields
    names = {f: option(fields[f]).benchmark or f for f in values}
    return {to_camel(names[f]): v for f, v in values.items()}


def test_every_option_a_benchmark_says_reaches_the_scheduler_as_the_cli_reads_it():
    """One options model per concern: each of its fields a Benchmark can say (every one not
    declared local-only) has a sample here, is a field of the CRD under the Benchmark's name,
    and reaches the scheduler pod as the flags the CLI parses back to the same options."""
    from dagperf.cli import build_parser
    from dagperf.cli.run_options import run_options
    from dagperf.options import CONCERNS
    from dagperf.vocabulary.options import options

    crd = yaml.safe_load(crd_yaml())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    body = {"dataset": {"configMapRef": {"name": "d"}}, "results": {"report": False},
            "serverMetrics": {"selector": {"app": "llm"}, "port": 8000}}  # fmt: skip
    for section, concern in CONCERNS.items():
        if concern.section is None:
            continue
        sayable = {name for name, _, opt in options(concern.model) if not opt.local}
        assert set(SAMPLES[section]) == sayable, f"a sample for every {section} option"
        written = _as_benchmark(section, SAMPLES[section])
        key = to_camel(concern.section)
        assert set(written) <= set(schema["properties"][key]["properties"]), section
        body[key] = body.get(key, {}) | written
    spec = BenchmarkSpec.model_validate(body)
    command = pod_commands.scheduler_command("demo", spec, "d.jsonl", OperatorSettings())
    assert command[:2] == ["dagperf", "profile"]  # repeated runs: one pod, local workers
    parser = build_parser()
    read = run_options(parser, parser.parse_args(command[1:]))
    # Without repeats, worker pods join a scheduler that says where it listens: the pod's own
    # addresses, even at the CLI's defaults (a node may map 0.0.0.0 to each pod's address).
    alone = BenchmarkSpec.model_validate(body | {"runs": {}})
    joined = pod_commands.scheduler_command("demo", alone, "d.jsonl", OperatorSettings())
    assert joined[1] == "scheduler" and joined[joined.index("--bind") + 1] == "tcp://0.0.0.0:5555"
    assert joined[joined.index("--metrics-host") + 1] == "0.0.0.0"
    worker = parser.parse_args(pod_commands.worker_command(spec, "tcp://demo:5555")[1:])
    assert (worker.url, worker.endpoint) == ("http://llm:8000", "/v2/complete")  # its own
    for section, concern in CONCERNS.items():
        if concern.section is None:
            continue
        expected = concern.model(**{**_local_fields(getattr(read, section)), **SAMPLES[section]})
        assert getattr(read, section) == expected, section
        assert spec.options(concern.section) == concern.model(**SAMPLES[section]), section


def _local_fields(values) -> dict:
    """The options the operator sets itself (where the pod's files are, its ports)."""
    from dagperf.vocabulary.options import options

    return {n: getattr(values, n) for n, _, opt in options(type(values)) if opt.local}


def test_the_report_is_written_where_the_files_are_kept():
    from dagperf.cli import build_parser

    def report_flag(results: dict) -> bool:
        spec = BenchmarkSpec.model_validate({
            "endpoint": {"url": "http://llm:8000"}, "dataset": {"configMapRef": {"name": "d"}},
            "results": results,
        })  # fmt: skip
        command = pod_commands.scheduler_command("demo", spec, "d.jsonl", OperatorSettings())
        report: bool = build_parser().parse_args(command[1:]).report
        return report

    claim = {"persistentVolumeClaim": {"claimName": "results"}}
    assert report_flag(claim)
    assert not report_flag(claim | {"report": False})
    assert not report_flag({})  # no claim: nowhere a reader could open it


def test_a_benchmark_places_its_pods_where_it_says():
    placement = {
        "nodeSelector": {"gpu": "none", "pool": "bench"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "bench",
                         "effect": "NoSchedule"}],
    }  # fmt: skip
    spec = BenchmarkSpec.model_validate({
        "endpoint": {"url": "http://llm:8000"}, "dataset": {"configMapRef": {"name": "d"}},
        "workers": {"placement": placement},
        "scheduler": {"placement": {"nodeSelector": {"a": "b"}}},
    })  # fmt: skip
    settings = OperatorSettings()
    workers = manifests.worker_deployment("demo", "ns", spec, settings)["spec"]["template"]["spec"]
    assert workers["nodeSelector"] == placement["nodeSelector"]
    assert workers["tolerations"] == placement["tolerations"]
    job = manifests.scheduler_job("demo", spec, "d.jsonl", settings)["spec"]["template"]["spec"]
    assert job["nodeSelector"] == {"a": "b"} and "tolerations" not in job


def test_goodput_names_only_metrics_an_objective_can_name():
    with pytest.raises(ValueError, match=r"verdict\.goodput: 'ttft' is not a metric an objective"):
        BenchmarkSpec.model_validate({
            "endpoint": {"url": "http://llm:8000"}, "dataset": {"configMapRef": {"name": "d"}},
            "verdict": {"goodput": {"ttft": 200.0}},
        })  # fmt: skip


def test_load_rules_across_fields_are_the_cli_s():
    with pytest.raises(ValueError, match="--fixed-schedule and --request-rate"):
        BenchmarkSpec.model_validate(
            {"endpoint": {"url": "http://llm:8000"}, "dataset": {"configMapRef": {"name": "d"}},
             "load": {"fixedSchedule": True, "requestRate": 5.0}}
        )  # fmt: skip


def search_spec(**search) -> BenchmarkSpec:
    return BenchmarkSpec.model_validate({
        "endpoint": {"url": "http://llm:8000", "streaming": True, "model": "m",
                     "apiKeySecretRef": {"name": "llm-key"}},
        "dataset": {"configMapRef": {"name": "d"}}, "workers": {"processesPerPod": 3},
        "search": {"slo": ["time_to_first_token:p99:500", "error_rate:max:0.01"], **search},
    })  # fmt: skip


def test_a_search_benchmark_runs_dagperf_search_in_one_pod_with_local_workers(tmp_path):
    from dagperf.cli import build_parser

    spec = search_spec(parameter="session_rate", min=2, max=40, precision=0.1,
                       maxStepDuration=120)  # fmt: skip
    settings = OperatorSettings()
    command = pod_commands.scheduler_command("demo", spec, "d.jsonl", settings)
    assert command[:2] == ["dagperf", "search"] and "--bind" not in command
    args = build_parser().parse_args(command[1:])
    assert args.slo == [["time_to_first_token:p99:500", "error_rate:max:0.01"]]
    assert (args.search_parameter, args.search_min, args.search_max) == ("session_rate", 2, 40)
    assert (args.search_precision, args.sweep, args.workers) == (0.1, None, 3)
    assert args.max_step_duration == 120
    assert args.summary_file is not None and args.keys is not None
    pod = manifests.scheduler_job("demo", spec, "d.jsonl", settings)["spec"]["template"]["spec"]
    (keys,) = [v for v in pod["volumes"] if v["name"] == "keys"]
    assert {item["key"] for item in keys["secret"]["items"]} >= {
        "worker.secret",
        "scheduler.secret",
    }
    (container,) = pod["containers"]
    (key,) = [e for e in container["env"] if e["name"] == "OPENAI_API_KEY"]  # its workers send
    assert key["valueFrom"]["secretKeyRef"]["name"] == "llm-key"
    swept = pod_commands.scheduler_command("demo", search_spec(sweep=[1, 2, 4]), "d", settings)
    assert swept[swept.index("--sweep") + 1] == "1,2,4"


@pytest.mark.parametrize(
    ("search", "extra", "complaint"),
    [
        ({"slo": ["ttft:p99:1"]}, {}, "unknown metric 'ttft'"),
        ({"slo": []}, {}, "at least 1 item"),
        ({"min": 8, "max": 2}, {}, "search.max: 2 is below the lowest load, 8"),
        ({"sweep": [1, 2.5]}, {}, "search.sweep: a concurrency is a whole number"),
        ({}, {"load": {"concurrency": 4}}, "load.concurrency: the search sets it"),
        (
            {"parameter": "session_rate"},
            {"load": {"fixedSchedule": True}},
            "load.fixedSchedule: a rate search sets when roots arrive",
        ),
        (
            {"parameter": "request_rate"},
            {"load": {"durationSeconds": 5, "requestRate": 2.0}},
            "load.requestRate: the search sets it",
        ),
        (
            {"maxStepDuration": 30},
            {"load": {"durationSeconds": 60}},
            "load.durationSeconds: the shortest a step runs, above the longest a step measures",
        ),
        ({}, {"endpoint": {"url": "http://llm:8000", "streaming": False}}, "needs --streaming"),
    ],
)
def test_a_search_that_cannot_run_is_refused_with_the_reason(search, extra, complaint):
    body = {
        "endpoint": {"url": "http://llm:8000", "streaming": True},
        "dataset": {"configMapRef": {"name": "d"}},
        "search": {"slo": ["time_to_first_token:p99:500"], **search},
    } | extra
    with pytest.raises(ValidationError, match=complaint):
        BenchmarkSpec.model_validate(body)


def test_the_operator_without_its_extra_says_which_to_install():
    """Installed as `pip install dagperf` alone, kopf and kubernetes are missing: one line says
    which extra brings them (played here by hiding kopf from the import system)."""
    probe = ("import sys; sys.modules['kopf'] = None; "
             "from dagperf_operator.cli import main; sys.exit(main([]))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "dagperf-operator: needs kopf, which the operator extra installs: "
        "pip install 'dagperf[operator]'"
    )


@pytest.mark.parametrize("selector", [{"app": "a,b=c"}, {"app x": "vllm"}, {"app": "-x"}])
def test_a_server_metrics_selector_must_be_label_terms(selector):
    with pytest.raises(ValidationError, match="not a label selector term"):
        BenchmarkSpec.model_validate({
            "endpoint": {"url": "http://llm:8000"}, "dataset": {"configMapRef": {"name": "d"}},
            "serverMetrics": {"selector": selector, "port": 8000},
        })  # fmt: skip


def test_a_dataset_comes_from_exactly_one_source_and_reaches_the_scheduler_from_it():
    from dagperf.cli import build_parser

    def spec_with(dataset: dict) -> BenchmarkSpec:
        return BenchmarkSpec.model_validate(
            {"endpoint": {"url": "http://llm:8000"}, "dataset": dataset}
        )

    digest = "AB" * 32
    claim = {"persistentVolumeClaim": {"claimName": "data", "path": "big/d.jsonl"}}
    url = {"url": {"url": "https://example.invalid/d.jsonl", "sha256": digest}}
    for both in ({**claim, **url}, {}):
        with pytest.raises(ValidationError, match="give one of configMapRef, url or persistent"):
            spec_with(both)
    for path in ("/etc/passwd", "../d.jsonl", "a/../../d.jsonl"):
        with pytest.raises(ValidationError, match=r"relative, without '\.\.'"):
            spec_with({"persistentVolumeClaim": {"claimName": "data", "path": path}})
    settings = OperatorSettings()
    job = manifests.scheduler_job("demo", spec_with(claim), "big/d.jsonl", settings)
    pod = job["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "dataset"]
    assert volume["persistentVolumeClaim"] == {"claimName": "data", "readOnly": True}
    args = build_parser().parse_args(pod["containers"][0]["command"][1:])
    assert (args.input_file, args.input_sha256) == ("/dataset/big/d.jsonl", None)
    kubernetes_validate.validate(job, kubernetes_validate.utils.latest_version(), strict=True)


@pytest.mark.parametrize(
    ("url", "file", "size_limit"),
    [
        ("https://example.invalid/big/d.jsonl?X-Amz-Signature=s3cr3t", "d.jsonl", None),
        ("https://example.invalid/d.jsonl.gz", "d.jsonl.gz", "20Gi"),
        ("https://example.invalid/", "dataset", None),
        ("https://example.invalid/a%2F..%2Fb", "dataset", None),
        ("https://example.invalid/.hidden", "dataset", None),
    ],
)
def test_a_url_dataset_is_fetched_by_an_init_container_into_an_empty_dir(url, file, size_limit):
    """The init container runs `dagperf fetch` with the scheduler's image, security context
    and resources, the URL in its environment only; the scheduler reads the checked copy
    from the emptyDir, mounted read-only, and never sees the URL."""
    from dagperf.cli import build_parser

    digest = "AB" * 32
    ref = {"url": url, "sha256": digest} | ({"sizeLimit": size_limit} if size_limit else {})
    spec = BenchmarkSpec.model_validate(
        {"endpoint": {"url": "http://llm:8000"}, "dataset": {"url": ref},
         "scheduler": {"resources": {"requests": {"cpu": "2"}}}}
    )  # fmt: skip
    job = manifests.scheduler_job("demo", spec, None, OperatorSettings())
    kubernetes_validate.validate(job, kubernetes_validate.utils.latest_version(), strict=True)
    pod = job["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "dataset"]
    assert volume == {
        "name": "dataset",
        "emptyDir": {"sizeLimit": size_limit} if size_limit else {},
    }
    (scheduler,) = pod["containers"]
    (init,) = pod["initContainers"]
    for key in ("image", "imagePullPolicy", "securityContext", "resources"):
        assert init[key] == scheduler[key], key
    assert init["securityContext"]["readOnlyRootFilesystem"] is True
    assert init["resources"] == {"requests": {"cpu": "2"}, "limits": {}}
    mounts = {m["mountPath"]: m for m in init["volumeMounts"]}
    assert mounts["/dataset"] == {"name": "dataset", "mountPath": "/dataset"}  # it writes there
    assert {"name": "dataset", "mountPath": "/dataset", "readOnly": True} in scheduler[
        "volumeMounts"
    ]

    fetch = build_parser().parse_args(init["command"][1:])
    assert fetch.run.__name__ == "_fetch" and fetch.url is None
    assert (fetch.sha256, str(fetch.output)) == (digest.lower(), f"/dataset/{file}")
    assert {"name": fetch.url_env, "value": url} in init["env"]
    assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"
    args = build_parser().parse_args(scheduler["command"][1:])
    assert (args.input_file, args.input_sha256) == (f"/dataset/{file}", None)
    assert "example.invalid" not in json.dumps(scheduler)
    assert url not in json.dumps(init["command"])


def test_a_url_session_config_is_read_from_the_fetched_copy():
    from dagperf.cli import build_parser

    spec = BenchmarkSpec.model_validate({
        "endpoint": {"url": "http://llm:8000"}, "dataset": {"type": "session_config",
        "url": {"url": "https://example.invalid/linear.yaml", "sha256": "ab" * 32}},
    })  # fmt: skip
    job = manifests.scheduler_job("demo", spec, None, OperatorSettings())
    pod = job["spec"]["template"]["spec"]
    args = build_parser().parse_args(pod["containers"][0]["command"][1:])
    assert (args.session_config, args.input_file) == ("/dataset/linear.yaml", None)
    assert str(build_parser().parse_args(pod["initContainers"][0]["command"][1:]).output) == (
        "/dataset/linear.yaml"
    )


def test_a_url_datasets_size_limit_must_be_a_quantity():
    for bad in ("lots", "20 Gi", "-1Gi", "20GB"):
        said = r"dataset\.url\.sizeLimit\n  String should match pattern"
        with pytest.raises(ValidationError, match=said):
            BenchmarkSpec.model_validate({
                "endpoint": {"url": "http://llm:8000"},
                "dataset": {"url": {"url": "https://x.invalid/d", "sha256": "ab" * 32,
                                    "sizeLimit": bad}},
            })  # fmt: skip


def test_a_benchmark_takes_every_dataset_type_the_cli_reads():
    import typing

    from dagperf.dataset.formats import FORMATS
    from dagperf.sources import SESSION_CONFIG
    from dagperf_operator.spec import Dataset

    taken = typing.get_args(Dataset.model_fields["type"].annotation)
    assert set(taken) == {*FORMATS, SESSION_CONFIG}
