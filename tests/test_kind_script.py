"""tests/e2e/kind.sh, checked where no Docker engine or cluster runs: shellcheck, its refusal
when a tool is missing, and its whole flow with stand-in kind, docker, kubectl and helm commands
that record what it asks of them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from dagperf_operator.manifests import Names
from dagperf_operator.settings import OperatorSettings

import image_runtime

ROOT = Path(__file__).resolve().parent.parent
SIMULATOR = ROOT / "examples" / "simulator.yaml"
BENCHMARK = ROOT / "examples" / "benchmark.yaml"
KIND_SH = ROOT / "tests" / "e2e" / "kind.sh"
BIN = Path(sys.executable).parent  # the venv's: shellcheck
CLUSTER_TOOLS = ("kind", "docker", "kubectl", "helm")
UID = OperatorSettings().run_as_user
IMAGE = image_runtime.image_name()  # the chart's image, which the script builds and loads


# --- tests/e2e/kind.sh -----------------------------------------------------------------------

# The tools the script uses besides the cluster ones: bash and a few coreutils.
BASE_TOOLS = ("bash", "env", "cat", "dirname", "sed", "grep", "mkdir", "ls", "rm", "sleep")

STUB = """#!PYTHON
# A stand-in for kind, docker, kubectl or helm: it records its arguments (and what it reads for
# `-f -`), then answers by the first of the test's rules whose words all appear in its command.
import json, os, sys
from pathlib import Path

tool, args = Path(sys.argv[0]).name, sys.argv[1:]
call = {"tool": tool, "args": args}
if "-f" in args and args[args.index("-f") + 1] == "-":
    call["stdin"] = sys.stdin.read()
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(json.dumps(call) + "\\n")
line = " ".join([tool, *args])
for rule in json.loads(Path(os.environ["STUB_RULES"]).read_text()):
    if all(word in line for word in rule["when"]):
        for name in rule.get("files", []):  # `kubectl cp`: files land in the last argument
            Path(args[-1], name).write_text('{"stub": true}')
        sys.stdout.write(rule.get("stdout", ""))
        sys.stderr.write(rule.get("stderr", ""))
        sys.exit(rule.get("exit", 0))
"""


@dataclass
class Script:
    """kind.sh run with a PATH of bash, coreutils and whichever stand-ins a test installs."""

    tmp: Path
    rules: list[dict[str, Any]] = field(default_factory=list)
    cluster: str = "dagperf-e2e-test"

    def __post_init__(self) -> None:
        self.bin = self.tmp / "bin"
        self.bin.mkdir()
        for tool in BASE_TOOLS:
            found = shutil.which(tool)
            assert found, tool
            (self.bin / tool).symlink_to(found)
        self.log = self.tmp / "calls.jsonl"
        self.results = self.tmp / "results"
        self.chart = self.tmp / "chart"

    def stub(self, *tools: str) -> None:
        for tool in tools:
            path = self.bin / tool
            path.write_text(STUB.replace("PYTHON", sys.executable))
            path.chmod(0o755)

    def run(self, **env: str) -> subprocess.CompletedProcess[str]:
        (self.tmp / "rules.json").write_text(json.dumps(self.rules))
        environment = {
            "PATH": str(self.bin),
            "HOME": str(self.tmp),
            "STUB_LOG": str(self.log),
            "STUB_RULES": str(self.tmp / "rules.json"),
            "KIND_CLUSTER": self.cluster,
            "RESULTS_DIR": str(self.results),
            "CHART_DIR": str(self.chart),
            **env,
        }
        return subprocess.run(
            [str(self.bin / "bash"), str(KIND_SH)],
            cwd=self.tmp,
            env=environment,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def commands(self) -> list[list[str]]:
        """Each call as tool + arguments, without kubectl's leading --context option."""
        out = []
        for call in self.calls():
            args = call["args"]
            if call["tool"] == "kubectl":
                assert args[:2] == ["--context", f"kind-{self.cluster}"], args
                args = args[2:]
            out.append([call["tool"], *args])
        return out


def assert_clean_refusal(run: subprocess.CompletedProcess[str]) -> None:
    assert run.returncode == 2, run.stderr
    assert run.stdout == ""
    for noise in ("Traceback", "command not found", "unbound variable", "syntax error"):
        assert noise not in run.stderr
    assert not re.search(r"line \d+:", run.stderr), run.stderr  # no bash error of its own


def test_shellcheck_passes():
    shellcheck = Path(sys.executable).with_name("shellcheck")
    result = subprocess.run(
        [str(shellcheck), "--severity=style", str(KIND_SH)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_script_is_strict_executable_bash():
    lines = KIND_SH.read_text().splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines
    assert os.access(KIND_SH, os.X_OK)


def test_without_kind_docker_kubectl_and_helm_it_exits_2_and_names_each(tmp_path):
    script = Script(tmp_path)
    assert not any((script.bin / tool).exists() for tool in CLUSTER_TOOLS)
    run = script.run()
    assert_clean_refusal(run)
    missing = run.stderr.split("missing:", 1)[1]
    named = [line.split(":")[0].strip() for line in missing.strip().splitlines()]
    assert named == list(CLUSTER_TOOLS)
    assert "https://" in missing  # and where to get each
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "rules.json"]  # made nothing


def test_a_docker_client_without_an_engine_counts_as_missing(tmp_path):
    script = Script(tmp_path)
    script.stub(*CLUSTER_TOOLS)
    daemon = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock.\n"
    script.rules = [{"when": ["docker info"], "stderr": daemon, "exit": 1}]
    run = script.run()
    assert_clean_refusal(run)
    assert "Docker engine" in run.stderr and daemon.strip() in run.stderr
    for tool in ("kind", "kubectl", "helm"):
        assert f"{tool}:" not in run.stderr  # present: not reported
    assert [c[:2] for c in script.commands()] == [["docker", "info"]]  # nothing else was run
    assert not script.results.exists()


def test_a_missing_chart_stops_it_before_any_cluster_is_made(tmp_path):
    script = Script(tmp_path)
    script.stub(*CLUSTER_TOOLS)
    run = script.run()
    assert run.returncode == 1
    assert f"no Helm chart at {script.chart}" in run.stderr
    assert [c[:2] for c in script.commands()] == [["docker", "info"]]


def cluster_script(tmp_path: Path, *rules: dict[str, Any], image: str = IMAGE) -> Script:
    """Every tool present and working, a chart to install (whose image is `image`), and the
    given answers first."""
    script = Script(tmp_path)
    script.stub(*CLUSTER_TOOLS)
    script.chart.mkdir()
    repository, version = image.rsplit(":", 1)
    (script.chart / "Chart.yaml").write_text(
        f'apiVersion: v2\nname: dagperf\nversion: 0.1.0\nappVersion: "{version}"\n'
    )
    (script.chart / "values.yaml").write_text(
        f'# the image\nimage:\n  repository: {repository}  # where\n  tag: ""\nother: 1\n'
    )
    script.rules = [
        *rules,
        {"when": ["docker info"], "stdout": "28.2.2\n"},
        {"when": ["kind get clusters"], "stdout": "some-other-cluster\n"},
        # the chart's operator gives benchmark pods the image the script loaded
        {"when": ["kubectl", "get deployment dagperf-operator"], "stdout": image},
        {"when": ["kubectl", " cp "], "files": ["profile_export_aiperf.json", "inputs.json"]},
    ]
    return script


def position(commands: list[list[str]], *words: str) -> int:
    """Where the first command holding all these arguments, in this order, was run."""
    for n, command in enumerate(commands):
        at = 0
        for word in words:
            if word not in command[at:]:
                break
            at = command.index(word, at) + 1
        else:
            return n
    raise AssertionError(f"never ran {' '.join(words)}:\n" + "\n".join(map(" ".join, commands)))


def test_a_full_run_builds_installs_benchmarks_copies_and_deletes_the_cluster(tmp_path):
    script = cluster_script(tmp_path)
    run = script.run()
    assert run.returncode == 0, run.stdout + run.stderr
    commands = script.commands()
    cluster = script.cluster
    steps = [
        position(commands, "docker", "info"),
        position(commands, "kind", "create", "cluster", "--name", cluster),
        position(commands, "docker", "build", "-t", IMAGE, str(ROOT)),
        position(commands, "kind", "load", "docker-image", IMAGE, "--name", cluster),
        position(commands, "helm", "upgrade", "--install", "dagperf", str(script.chart)),
        position(commands, "kubectl", "-n", "default", "apply", "-f", "-"),
        position(commands, "kubectl", "rollout", "status", "deployment/dagperf-simulator"),
        position(commands, "kubectl", "apply", "-f", str(BENCHMARK)),
        position(commands, "kubectl", "wait", "benchmarks.dagperf.io/example"),
        position(commands, "kubectl", "cp", "dagperf-e2e-results:/results/example"),
        position(commands, "kind", "delete", "cluster", "--name", cluster),
    ]
    assert steps == sorted(steps), "\n".join(map(" ".join, commands))
    assert steps[-1] == len(commands) - 1  # deleting the cluster is the last thing it does

    helm = commands[steps[4]]
    assert helm[helm.index("image.pullPolicy=Never") - 1] == "--set"
    assert not [a for a in helm if a.startswith(("image.repository", "image.tag"))]  # its own
    for option in ("--wait", "--create-namespace"):
        assert option in helm
    assert helm[helm.index("--namespace") + 1] == "dagperf"
    assert helm[helm.index("--kube-context") + 1] == f"kind-{cluster}"
    wait = commands[steps[8]]
    assert "--for=jsonpath={.status.phase}=Succeeded" in wait
    assert any(arg.startswith("--timeout=") for arg in wait)

    # The simulator it applied is examples/simulator.yaml, which runs the image it loaded, as
    # it is but for the pull policy.
    applied = [c for c in script.calls() if "stdin" in c]
    simulator = list(yaml.safe_load_all(applied[0]["stdin"]))
    expected = list(yaml.safe_load_all(SIMULATOR.read_text()))
    container = expected[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == IMAGE
    container.update(imagePullPolicy="Never")
    assert simulator == expected

    # The pod it copies through mounts the Benchmark's claim and passes Kubernetes' schema.
    (copier,) = yaml.safe_load_all(applied[1]["stdin"])
    kubernetes_validate.validate(copier, kubernetes_validate.utils.latest_version(), strict=True)
    (volume,) = copier["spec"]["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == Names("example").claim
    (copy,) = copier["spec"]["containers"]
    assert (copy["image"], copy["imagePullPolicy"]) == (IMAGE, "Never")
    assert copier["spec"]["securityContext"]["runAsUser"] == UID

    assert sorted(p.name for p in script.results.iterdir()) == [
        "inputs.json",
        "profile_export_aiperf.json",
    ]
    assert "Benchmark example succeeded" in run.stdout


def test_an_existing_cluster_is_reused_and_kept_when_asked(tmp_path):
    script = cluster_script(
        tmp_path, {"when": ["kind get clusters"], "stdout": "x\ndagperf-e2e-test\n"}
    )
    run = script.run(KEEP_CLUSTER="1")
    assert run.returncode == 0, run.stdout + run.stderr
    kind = [c for c in script.commands() if c[0] == "kind"]
    assert [c[1] for c in kind] == ["get", "load"]  # no create, no delete
    assert "kind delete cluster --name dagperf-e2e-test" in run.stdout  # says how to


@pytest.mark.parametrize("keep", ["0", "1"])
def test_a_failed_benchmark_shows_its_status_and_scheduler_logs(tmp_path, keep):
    script = cluster_script(
        tmp_path,
        {"when": ["kubectl", " wait ", "benchmarks.dagperf.io/example"], "exit": 1},
        {"when": ["kubectl", " get ", "{.status.phase}"], "stdout": "Failed"},
        {"when": ["kubectl", " get ", "-o yaml"], "stdout": "status:\n  phase: Failed\n"},
        {"when": ["kubectl", " logs ", "job/example-scheduler"], "stdout": "scheduler: gave up\n"},
    )
    run = script.run(KEEP_CLUSTER=keep, BENCH_TIMEOUT="300")
    assert run.returncode == 1
    assert "Benchmark example did not succeed (phase: Failed)" in run.stderr
    assert "status:\n  phase: Failed" in run.stderr
    assert "scheduler: gave up" in run.stderr
    commands = script.commands()
    assert not [c for c in commands if c[:2] == ["kubectl", "cp"]]
    deleted = ["kind", "delete", "cluster", "--name", script.cluster] in commands
    assert deleted == (keep != "1")
    assert not script.results.exists()


def test_a_simulator_example_on_another_image_than_the_charts_stops_it(tmp_path):
    """The chart's image is what the script builds and loads: an example naming another (here,
    a chart of a newer version) would sit in ErrImageNeverPull; the script says so instead."""
    script = cluster_script(tmp_path, image="dagperf:9.9.9")
    run = script.run()
    assert run.returncode == 1
    assert "examples/simulator.yaml does not run dagperf:9.9.9, the image the chart runs" in (
        run.stderr
    )
    assert position(script.commands(), "docker", "build", "-t", "dagperf:9.9.9", str(ROOT)) >= 0
    assert not [c for c in script.commands() if "rollout" in c]


def test_a_chart_without_its_image_stops_it_before_any_cluster_is_made(tmp_path):
    script = cluster_script(tmp_path)
    (script.chart / "values.yaml").unlink()
    run = script.run()
    assert run.returncode == 1
    assert "names no image.repository (values.yaml) or appVersion" in run.stderr
    assert [c[:2] for c in script.commands()] == [["docker", "info"]]
