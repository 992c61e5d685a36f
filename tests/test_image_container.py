"""The image, built by tests/image/build.sh from the unchanged Dockerfile and run as the cluster
runs it: uid 10001, read-only root filesystem, /tmp a tmpfs, no capabilities, no privilege
escalation, the host's loopback network. What it holds is checked by listing its files; what
it was built from by its labels, its SBOM and the build record beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from dagperf_operator.settings import OperatorSettings

import image_runtime
from image_runtime import podman
from runs import read_jsonl

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parent.parent
DATASET = ROOT / "examples" / "dag_jsonl" / "example.dag.jsonl"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
UID = OperatorSettings().run_as_user
BUDGET_MB = 400  # Debian base 129 MB; the venv without pip, tests or unused bytecode
LOCKED_DOWN = [
    f"--user={UID}:{UID}",
    "--read-only",
    "--read-only-tmpfs=false",  # only the /tmp below is writable, as in a pod
    "--tmpfs=/tmp",
    "--cap-drop=ALL",
    "--security-opt=no-new-privileges",
    "--network=host",
]


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The image run locked down, as benchmark pods run it."""
    return podman("run", "--rm", "--pull=never", *LOCKED_DOWN, *args, timeout=timeout)


def test_profile_runs_on_the_built_in_simulator_as_a_pod_would(image, tmp_path):
    data, results = tmp_path / "data", tmp_path / "results"
    data.mkdir()
    (data / DATASET.name).write_bytes(DATASET.read_bytes())
    results.mkdir()
    results.chmod(0o777)  # as an emptyDir is
    profile = run(
        f"--volume={data}:/data:ro",
        f"--volume={results}:/results",
        image_runtime.image_name(),
        *["dagperf", "profile", "--input-file", f"/data/{DATASET.name}"],
        *["--custom-dataset-type", "dag_jsonl", "--artifact-dir", "/results/run"],
    )
    assert profile.returncode == 0, profile.stdout + profile.stderr
    records = read_jsonl(results / "run" / "profile_export.jsonl")
    assert len(records) == 5 and [r for r in records if r["error"]] == []
    exported = json.loads((results / "run" / "profile_export_aiperf.json").read_text())
    assert exported["request_count"]["avg"] == 5
    # written by the image's user, not root
    assert {p.stat().st_uid for p in (results / "run").iterdir()} == {UID}


ROLES = [["dagperf", "worker"], ["dagperf", "scheduler"], ["dagperf-operator"]]


@pytest.mark.parametrize("command", [[*role, "--help"] for role in ROLES])
def test_each_role_starts(image, command):
    started = run(image_runtime.image_name(), *command, timeout=120)
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith(f"usage: {command[0]}")


def test_the_operator_starts_and_asks_for_a_cluster(image):
    """Past its imports (kopf, the kubernetes client) to its first question: where the cluster
    is. Outside a pod, with no kubeconfig, it says so and exits 2."""
    started = run(image_runtime.image_name(), "dagperf-operator", timeout=120)
    assert started.returncode == 2, started.stdout + started.stderr
    assert started.stderr.startswith("dagperf-operator: no cluster to talk to:")
    assert "Traceback" not in started.stderr


def test_it_runs_unprivileged_on_a_read_only_root(image):
    script = "id -u; id -g; grep CapEff /proc/self/status; touch /opt/venv/x || true; touch /tmp/x"
    probe = run(image_runtime.image_name(), "sh", "-c", script, timeout=120)
    assert probe.returncode == 0, probe.stderr
    uid, gid, capabilities = probe.stdout.splitlines()
    assert (uid, gid) == (str(UID), str(UID))
    assert capabilities.split() == ["CapEff:", "0000000000000000"]
    assert "Read-only file system" in probe.stderr


@pytest.fixture(scope="module")
def files(image) -> Iterator[Path]:
    """The image's root filesystem, mounted read-only on the host for listing."""
    mounted = podman("image", "mount", image_runtime.image_name())
    assert mounted.returncode == 0, mounted.stderr
    try:
        yield Path(mounted.stdout.strip())
    finally:
        podman("image", "unmount", image_runtime.image_name())


def test_it_holds_no_compiler_pip_cache_or_sources(files):
    venv = files / "opt" / "venv"
    (site,) = (venv / "lib").glob("python3.*/site-packages")
    installed = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
    assert {"dagperf", "kopf", "kubernetes", "numpy"} <= installed
    assert not {"pip", "setuptools", "wheel"} & installed
    assert not (venv / "bin" / "pip").exists() and not (site / "pip").exists()
    for tool in ("gcc", "cc", "c++", "g++", "clang", "ld", "make", "as"):
        assert not (files / "usr" / "bin" / tool).exists(), tool
    assert not list(files.glob("usr/lib/gcc*")) and not list(files.glob("usr/include/python*"))
    caches = [p for p in files.glob("**/.cache") if p.is_dir()]
    assert caches == []
    assert not (files / "src").exists()
    assert not list(files.glob("**/pyproject.toml"))
    # the project is installed as files, not linked to sources elsewhere (an editable install)
    assert (site / "dagperf" / "cli").is_dir() and not list(site.glob("__editable__*"))
    assert not [p for p in site.glob("*.pth") if "/src" in p.read_text()]
    assert not list(site.glob("**/tests")) and not (site / "kubernetes" / "aio").exists()


def test_bytecode_is_there_for_what_the_roles_import_and_only_that(files):
    (site,) = (files / "opt" / "venv" / "lib").glob("python3.*/site-packages")
    assert list((site / "dagperf" / "cli" / "__pycache__").glob("*.pyc"))
    assert list((site / "kopf" / "__pycache__").glob("*.pyc"))
    assert list((site / "kubernetes" / "client" / "models" / "__pycache__").glob("*.pyc"))
    # plotly's figure classes are never imported (the report inlines its JavaScript bundle)
    assert not (site / "plotly" / "graph_objs" / "__pycache__").exists()


def test_it_fits_its_size_budget(image):
    size = int(podman("image", "inspect", "--format={{.Size}}", image_runtime.image_name()).stdout)
    assert size <= BUDGET_MB * 10**6, f"{size / 10**6:.0f} MB"


def git(*args: str) -> str:
    env = os.environ | {"TZ": "UTC0"}  # commit times in UTC, as the build writes them
    found = subprocess.run(["git", *args], cwd=ROOT, env=env, capture_output=True, text=True)
    return found.stdout.strip()


def test_its_labels_say_what_it_is_and_where_it_comes_from(image):
    inspected = podman("image", "inspect", image_runtime.image_name())
    (image,) = json.loads(inspected.stdout)
    labels = image["Labels"]
    key = "org.opencontainers.image."
    assert labels[key + "version"] == PYPROJECT["project"]["version"]
    assert labels[key + "licenses"] == PYPROJECT["project"]["license"]
    assert labels[key + "revision"].removesuffix("-dirty") == git("rev-parse", "HEAD")
    committed = git("log", "-1", "--date=format-local:%Y-%m-%dT%H:%M:%SZ", "--format=%cd")
    assert labels[key + "created"] == committed
    assert labels[key + "source"].startswith("https://")
    assert image["Config"]["User"] == f"{UID}:{UID}"


def test_an_sbom_and_the_base_digest_are_written_beside_it(image):
    sbom = json.loads((image / "sbom.cdx.json").read_text())
    assert sbom["bomFormat"] == "CycloneDX"
    components = {c["name"].lower(): c for c in sbom["components"]}
    assert components["dagperf"]["version"] == PYPROJECT["project"]["version"]
    assert components["kopf"]["purl"].startswith("pkg:pypi/kopf@")
    assert "pip" not in components and "setuptools" not in components
    lines = (image / "build.txt").read_text().splitlines()
    record = dict(line.split(": ", 1) for line in lines if ": " in line)
    base = podman("image", "inspect", "--format={{.Digest}}", record["base"].split()[0])
    assert record["base digest"] == base.stdout.strip() and base.stdout.startswith("sha256:")
    assert record["image"] == f"localhost/{image_runtime.image_name()}"
