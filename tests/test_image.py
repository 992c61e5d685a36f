"""The container image, checked without building it: the Dockerfile and .dockerignore read as
Docker reads them, the one name every file gives the image, and examples/simulator.yaml against
Kubernetes' schemas and by running its command. The image built and run is
tests/test_image_container.py's (`-m image`).
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import kubernetes_validate
import pytest
import yaml

import dagperf
from dagperf_operator.settings import OperatorSettings
from test_chart import operator_container, render

import image_runtime
from runs import free_port

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
SIMULATOR = ROOT / "examples" / "simulator.yaml"
BENCHMARK = ROOT / "examples" / "benchmark.yaml"
KIND_SH = ROOT / "tests" / "e2e" / "kind.sh"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
UID = OperatorSettings().run_as_user
BIN = Path(sys.executable).parent  # the venv's: dagperf, shellcheck
CLUSTER_TOOLS = ("kind", "docker", "kubectl", "helm")


# --- the Dockerfile, read as Docker reads it ---------------------------------------------------


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]

    def env(self) -> dict[str, str]:
        return dict(item.split("=", 1) for rest in self.all("ENV") for item in shlex.split(rest))


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) pairs, with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, rest = (pending + stripped).partition(" ")
        out.append((keyword.upper(), rest.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continuation line"
    return out


def stages() -> list[Stage]:
    args: dict[str, str] = {}
    out: list[Stage] = []
    for keyword, rest in instructions(DOCKERFILE.read_text()):
        if keyword == "ARG" and not out:  # global build arguments, usable in FROM lines
            name, _, default = rest.partition("=")
            args[name] = default
        elif keyword == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m[1] or m[2]], words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            out.append(Stage(base, name))
        else:
            out[-1].instructions.append((keyword, rest))
    return out


def test_both_stages_start_from_the_same_pinned_slim_python_base():
    builder, final = stages()
    assert builder.name == "builder" and final.name is None
    assert final.base == builder.base  # the venv's interpreter path must exist in the final one
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim-[a-z]+", final.base), final.base
    assert PYPROJECT["project"]["requires-python"] == ">=3.11"


def pip_arguments(run: str) -> list[str]:
    """The arguments of the `pip install` in a RUN line, up to the next `&&`."""
    words = shlex.split(run)
    start = words.index("install", words.index("pip")) + 1
    return words[start : words.index("&&", start) if "&&" in words[start:] else None]


def test_the_builder_installs_the_project_with_the_operator_extra_into_a_venv():
    builder, _ = stages()
    runs = " && ".join(builder.all("RUN"))
    venv = re.search(r"python -m venv (\S+)", runs)
    assert venv, "the builder makes no virtualenv"
    dependencies, project = [r for r in builder.all("RUN") if "pip install" in r]
    # The dependencies first, from pyproject.toml alone (a layer only its change rebuilds):
    # the build backend, the dependencies and the operator extra's.
    assert "tomllib" in dependencies and "requirements.txt" in dependencies
    for key in ("'build-system']['requires']", "['dependencies']", "['operator']"):
        assert key in dependencies, key
    for pip_args in (pip_arguments(dependencies), pip_arguments(project)):
        assert {"--no-cache-dir", "--no-compile"} <= set(pip_args)
        assert not {"-e", "--editable"} & set(pip_args), "an editable leaves the code behind"
    # Then the project itself, with nothing else (its dependencies are there).
    pip_args = pip_arguments(project)
    assert {"--no-deps", "--no-build-isolation"} <= set(pip_args)
    (target,) = [a for a in pip_args if not a.startswith("-")]
    extras = re.fullmatch(r"\.\[([\w,]+)\]", target)
    assert extras, f"installs {target!r}, not the project with extras"
    assert "operator" in extras[1].split(",") and "test" not in extras[1].split(",")
    assert "pip uninstall --yes --quiet pip setuptools" in project  # nothing installs later
    assert builder.env()["PATH"].startswith(f"{venv[1]}/bin:")  # so that pip is the venv's

    # It copies pyproject.toml before the dependencies' step, and what the project's build
    # needs (the readme, the source roots) only after it.
    copies = [(n, rest) for n, (kw, rest) in enumerate(builder.instructions) if kw == "COPY"]
    step = next(n for n, (kw, rest) in enumerate(builder.instructions) if rest == dependencies)
    before = {s.rstrip("/") for n, rest in copies if n < step for s in rest.split()[:-1]}
    after = {s.rstrip("/") for n, rest in copies if n > step for s in rest.split()[:-1]}
    assert before == {"pyproject.toml"}
    needed = {PYPROJECT["project"]["readme"]}
    needed |= set(PYPROJECT["tool"]["setuptools"]["packages"]["find"]["where"])
    assert needed <= after, f"the builder does not copy {needed - after}"


def test_the_final_stage_holds_only_the_venv_and_no_build_tools():
    builder, final = stages()
    venv = re.search(r"python -m venv (\S+)", " ".join(builder.all("RUN")))[1]
    assert final.all("COPY") == [f"--from=builder {venv} {venv}"]
    for run in final.all("RUN"):
        for tool in ("apt-get", "apt ", "apk ", "dpkg", "gcc", "build-essential", "make ", "pip"):
            assert tool not in run, f"the final stage runs {tool!r}: {run}"
    env = final.env()
    assert env["PATH"].startswith(f"{venv}/bin:")
    assert env["PYTHONDONTWRITEBYTECODE"] == "1" and env["PYTHONUNBUFFERED"] == "1"
    labels = dict(item.split("=", 1) for rest in final.all("LABEL") for item in shlex.split(rest))
    for key in ("title", "description", "licenses"):
        assert labels.get(f"org.opencontainers.image.{key}"), key
    assert labels["org.opencontainers.image.licenses"] == PYPROJECT["project"]["license"]
    (cmd,) = final.all("CMD")
    assert json.loads(cmd)[0] in PYPROJECT["project"]["scripts"]  # exec form, a console script


def test_the_image_runs_as_the_uid_benchmark_pods_ask_for():
    _, final = stages()
    assert final.all("USER")[-1] == f"{UID}:{UID}"  # numeric: runAsNonRoot can check it
    (user_setup,) = [r for r in final.all("RUN") if "useradd" in r]
    assert f"--uid {UID}" in user_setup and f"--gid {UID}" in user_setup
    assert f"groupadd --system --gid {UID}" in user_setup


# --- one name for the image ------------------------------------------------------------------


def images_named(node: Any) -> list[str]:
    """Every `image:` value in a manifest (containers, init containers, a Benchmark's spec)."""
    if isinstance(node, dict):
        own = [node["image"]] if isinstance(node.get("image"), str) else []
        return own + [found for value in node.values() for found in images_named(value)]
    if isinstance(node, list):
        return [found for value in node for found in images_named(value)]
    return []


def test_every_example_doc_and_default_names_the_one_image():
    """The chart's default image (image.repository, appVersion) is the one name: the version is
    the project's, the operator's own default and every manifest in examples/ are the same, and
    the README, docs/kubernetes.md and the Dockerfile build and push it under that name (their
    REGISTRY/ being the user's registry). tests/e2e/kind.sh and tests/image/build.sh read it from
    the chart (their own tests check what they build)."""
    image = image_runtime.image_name()
    repository, tag = image.rsplit(":", 1)
    assert tag == PYPROJECT["project"]["version"] == dagperf.__version__
    assert OperatorSettings().image == image
    operator = operator_container(render())
    assert operator["image"] == image
    assert {e["name"]: e.get("value") for e in operator["env"]}["DAGPERF_IMAGE"] == image

    manifests = sorted((ROOT / "examples").rglob("*.yaml"))
    named = {
        str(path.relative_to(ROOT)): images
        for path in manifests
        if (
            images := [i for doc in yaml.safe_load_all(path.read_text()) for i in images_named(doc)]
        )
    }
    assert named == {"examples/simulator.yaml": [image]}

    for page in ("README.md", "docs/kubernetes.md"):  # the steps, short and explained
        text = (ROOT / page).read_text()
        mentioned = re.findall(rf"[\w./-]*\b{re.escape(repository)}:\w[\w.-]*", text)
        assert mentioned and set(mentioned) <= {image, f"REGISTRY/{image}"}, (page, mentioned)
        assert f"docker build -t REGISTRY/{image} ." in text, page
        assert f"--set image.repository=REGISTRY/{repository}" in text, page  # tag: appVersion
        # the simulator step puts the pushed image in place of the example's
        applied = re.search(
            r'sed "s\|image: ([^|]*)\|image: ([^|]*)\|" examples/simulator.yaml', text
        )
        assert applied, page
        assert re.fullmatch(applied[1], image) and applied[2] == f"REGISTRY/{image}", page
    for page in sorted((ROOT / "docs").glob("*.md")):  # and no page names another
        found = re.findall(rf"[\w./-]*\b{re.escape(repository)}:\w[\w.-]*", page.read_text())
        assert set(found) <= {image, f"REGISTRY/{image}"}, (page.name, found)
    assert f"docker build -t {image} ." in DOCKERFILE.read_text()


# --- .dockerignore, with Docker's matching rules -------------------------------------------------


def _ignore_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern: `*` and `?` within one path element, `**` across several."""
    pattern = pattern.strip().strip("/")
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i : end + 1], end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def dockerignored(path: str) -> bool:
    """Docker's rule: the last pattern that matches the path, or a directory above it, decides;
    a `!` pattern puts it back."""
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    ignored = False
    for pattern in patterns:
        regex = _ignore_regex(pattern.removeprefix("!"))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            ignored = not pattern.startswith("!")
    return ignored


def test_dockerignore_keeps_local_state_out_of_the_build_context():
    for path in (
        ".git/HEAD",
        ".venv/bin/python",
        "worker/dagperf/__pycache__/cli.cpython-311.pyc",
        "dagperf.egg-info/PKG-INFO",
        ".pytest_cache/README.md",
        ".hypothesis/examples/x",
        "artifacts/run/profile_export.jsonl",
    ):
        assert dockerignored(path), path


def test_dockerignore_keeps_everything_the_build_needs():
    needed = ["pyproject.toml", PYPROJECT["project"]["readme"]]
    for root in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["where"]:
        sources = [p for p in (ROOT / root).rglob("*.py") if "__pycache__" not in p.parts]
        assert sources, root
        needed += [str(p.relative_to(ROOT)) for p in sources]
    assert [path for path in needed if dockerignored(path)] == []


# --- examples/simulator.yaml -----------------------------------------------------------------


def simulator_documents() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(SIMULATOR.read_text())}


def simulator_container() -> dict[str, Any]:
    (container,) = simulator_documents()["Deployment"]["spec"]["template"]["spec"]["containers"]
    return container


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def example_endpoint() -> dict[str, Any]:
    (benchmark,) = [
        d for d in yaml.safe_load_all(BENCHMARK.read_text()) if d["kind"] == "Benchmark"
    ]
    return benchmark["spec"]["endpoint"]


VERSIONS = sorted({"1.29.0", "1.33.0", kubernetes_validate.utils.latest_version()})


@pytest.mark.parametrize("version", VERSIONS)
def test_the_simulator_manifest_is_valid_kubernetes(version):
    documents = list(yaml.safe_load_all(SIMULATOR.read_text()))
    assert [d["kind"] for d in documents] == ["Deployment", "Service"]
    for document in documents:
        kubernetes_validate.validate(document, version, strict=True)


def test_the_simulator_is_where_the_example_benchmark_sends_its_requests():
    docs = simulator_documents()
    endpoint = example_endpoint()
    url = urlsplit(endpoint["url"])
    service, deployment = docs["Service"], docs["Deployment"]
    assert service["metadata"]["name"] == url.hostname == "dagperf-simulator"
    assert deployment["metadata"]["name"] == "dagperf-simulator"
    (port,) = service["spec"]["ports"]
    assert port["port"] == url.port and port["name"] == "http"
    container = simulator_container()
    (container_port,) = container["ports"]
    assert port["targetPort"] == container_port["name"]
    assert container_port["containerPort"] == int(flag(container["command"], "--port"))
    assert flag(container["command"], "--host") == "0.0.0.0"  # reachable through the Service
    assert flag(container["command"], "--model") == endpoint["model"]
    template_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= template_labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= template_labels.items()
    for labels in (deployment["metadata"]["labels"], service["metadata"]["labels"]):
        assert labels["app.kubernetes.io/name"] == "dagperf-simulator"
    # The URL is the Service's short name: both files go to the same namespace, the one applied to.
    for document in [*docs.values(), *yaml.safe_load_all(BENCHMARK.read_text())]:
        assert "namespace" not in document["metadata"], document["kind"]


def test_the_simulator_pod_is_locked_down_like_benchmark_pods():
    pod = simulator_documents()["Deployment"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["runAsGroup"] == UID
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = simulator_container()
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    # A read-only root filesystem needs a writable /tmp (HOME and TMPDIR point there).
    (scratch,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert {"name": scratch["name"], "emptyDir": {}} in pod["volumes"]
    assert {e["name"]: e["value"] for e in container["env"]} == {"HOME": "/tmp", "TMPDIR": "/tmp"}
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}
    assert "memory" in container["resources"]["limits"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == container["ports"][0]["name"], probe


async def get_when_up(session: aiohttp.ClientSession, url: str, process, deadline: float):
    """GET url once the server answers: it may still be starting; it must not have exited."""
    while True:
        assert process.returncode is None, (await process.stderr.read()).decode()
        try:
            async with session.get(url) as response:
                return response.status, await response.read()
        except aiohttp.ClientConnectionError:
            assert time.monotonic() < deadline, f"{url} did not answer in time"
            await asyncio.sleep(0.05)


async def test_the_simulator_command_serves_its_probes_and_the_benchmark_model():
    container = simulator_container()
    command = list(container["command"])
    port = free_port()
    command[command.index("--host") + 1] = "127.0.0.1"
    command[command.index("--port") + 1] = str(port)
    executable = BIN / command[0]
    assert executable.exists(), f"{command[0]} is not a console script of this project"
    process = await asyncio.create_subprocess_exec(
        str(executable),
        *command[1:],
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + 30
            readiness = container["readinessProbe"]["httpGet"]["path"]
            liveness = container["livenessProbe"]["httpGet"]["path"]
            assert (await get_when_up(session, base + readiness, process, deadline))[0] == 200
            assert (await get_when_up(session, base + liveness, process, deadline))[0] == 200
            status, body = await get_when_up(session, f"{base}/v1/models", process, deadline)
            assert status == 200
            assert [m["id"] for m in json.loads(body)["data"]] == [example_endpoint()["model"]]
    finally:
        if process.returncode is None:
            process.terminate()  # SIGTERM, as the kubelet stops a pod
        returncode = await asyncio.wait_for(process.wait(), timeout=15)
    assert returncode == 0
