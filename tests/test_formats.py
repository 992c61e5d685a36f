"""The table of dataset formats (`dagperf.dataset.formats.FORMATS`) is the one list of them: each
entry has its module and its description, the CLI and the CRD offer exactly its formats, and a
format registered from outside the package is validated and run like the others."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import subprocess
import sys
import tempfile
import tomllib
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from dagperf.cli import build_parser, main
from dagperf.dataset import DatasetError
from dagperf.dataset.formats import FORMATS, Format, ReadOptions, imported
from dagperf.dataset.formats.dag_jsonl import DagDataset
from dagperf.dataset.loader import Problems, jsonl_lines
from dagperf.dataset.specs import GraphNode, Payload, SessionSpec, TraceDataset
from dagperf.sources import SESSION_CONFIG

ROOT = Path(__file__).resolve().parent.parent
FORMATS_DIR = ROOT / "worker" / "dagperf" / "dataset" / "formats"


def read_prompt_lines(lines: Iterable[bytes], source: str) -> TraceDataset:
    """A format written for this test: each line a prompt, sent as one request."""
    problems = Problems(source)
    specs = []
    for lineno, raw in jsonl_lines(lines):
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            problems.add(lineno, "not UTF-8 text")
            continue
        payload = Payload.of([{"role": "user", "content": text}], max_tokens=4)
        specs.append(SessionSpec(f"prompt-{lineno}", (GraphNode("0", payload),)))
    if not specs and not problems.items:
        problems.add(None, "empty file: it needs a prompt")
    problems.raise_any()
    return TraceDataset(specs, None, timed=False)


@pytest.fixture
def prompt_lines(monkeypatch) -> str:
    """The test's format, registered as a new entry is: one line in the table, naming its
    reader (here an absolute module's; the table's are relative to the package)."""
    monkeypatch.setitem(FORMATS, "prompt_lines", Format(f"{__name__}:read_prompt_lines"))
    return "prompt_lines"


def test_a_format_registered_outside_the_package_is_validated_and_run(
    prompt_lines, tmp_path, capsys, monkeypatch
):
    data = tmp_path / "prompts.txt"
    data.write_bytes(b"Name three rivers.\n\nWhat is a FORK?\nSay hello.\n")
    assert main(["validate", str(data), "--custom-dataset-type", prompt_lines, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["roots"], summary["requests_per_run"]) == (3, 3)

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\n\xff\xfe\n")
    assert main(["validate", str(bad), "--custom-dataset-type", prompt_lines]) == 1
    assert f"{bad}:2: not UTF-8 text" in capsys.readouterr().out

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the run's socket and keys
    out = tmp_path / "out"
    flags = ["--custom-dataset-type", prompt_lines, "--artifact-dir", str(out), "--quiet"]
    assert main(["profile", "--input-file", str(data), *flags]) == 0
    records = [json.loads(line) for line in (out / "profile_export.jsonl").open()]
    assert sorted(r["metadata"]["conversation_id"] for r in records) == [
        "prompt-1",
        "prompt-3",
        "prompt-4",
    ]
    assert not any(r["error"] for r in records)
    sent = (out / "inputs.json").read_text()
    assert all(prompt in sent for prompt in ("Name three rivers.", "What is a FORK?", "Say hello."))


def dataset_type_choices(parser: argparse.ArgumentParser) -> dict[str, tuple[str, ...]]:
    """Each subcommand's --custom-dataset-type choices."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                for option in sub._actions:
                    if "--custom-dataset-type" in option.option_strings:
                        found[command] = tuple(option.choices or ())
    return found


def test_the_cli_offers_the_formats_of_the_table(prompt_lines):
    choices = dataset_type_choices(build_parser())
    assert {"profile", "validate", "scheduler", "search"} <= set(choices)
    assert set(choices.values()) == {tuple(FORMATS)}
    assert prompt_lines in choices["validate"]


def test_the_crd_enum_is_the_table_and_session_config():
    crd = yaml.safe_load((ROOT / "crds" / "benchmark.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    enum = spec["properties"]["dataset"]["properties"]["type"]["enum"]
    assert enum == [*FORMATS, SESSION_CONFIG]


def where_a_format_goes() -> list[str]:
    """The places docs/architecture.md's "Where a change goes" names for a dataset format."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Where a change goes", 1)[1].split("\n## ", 1)[0]
    entry = section.split("- **A dataset format**", 1)[1].split("\n- **", 1)[0]
    return re.findall(r"^  \d\. `([^`]+)`", entry, flags=re.MULTILINE)


def shared_modules() -> set[str]:
    """The modules beside the formats that hold what several share, and no format: those the
    import-linter contract that keeps the formats apart lets every format import."""
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [
        c
        for c in settings["tool"]["importlinter"]["contracts"]
        if c.get("modules") == ["dagperf.dataset.formats.*"]
    ]
    assert contract["type"] == "independence"
    return {line.split(" -> ")[1].split(".")[3] for line in contract["ignore_imports"]}


def test_every_format_is_where_the_architecture_says_a_format_goes():
    places = where_a_format_goes()
    assert places == [
        "worker/dagperf/dataset/formats/<type>.py",
        "worker/dagperf/dataset/formats/__init__.py",
        "docs/formats.md",
    ]
    modules = {p.stem for p in FORMATS_DIR.glob("*.py") if p.stem != "__init__"}
    packages = {p.parent.name for p in FORMATS_DIR.glob("*/__init__.py")}
    shared = shared_modules()
    assert modules | packages == set(FORMATS) | shared, "one module (or package) per format"
    described = (ROOT / "docs" / "formats.md").read_text()
    undocumented = [t for t in FORMATS if not re.search(rf"--custom-dataset-type {t}\b", described)]
    assert undocumented == []
    # and a row of its "At a glance" table: the type, one line of it, where an example is
    glance = described.split("## At a glance", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (.+?) \| (.+?) \|$", glance, flags=re.MULTILINE)
    kinds = [kind for kind, _, _ in rows]
    assert sorted(kinds) == sorted(FORMATS), "one row per format"
    assert all(line.strip() and example.strip() for _, line, example in rows)


def test_each_format_reads_the_run_options_its_entry_says_it_takes(tmp_path):
    """An entry's `takes` is what its reader reads of a run's options: the CLI builds a
    tokenizer only for a format that counts tokens with it."""
    names = {field.name for field in dataclasses.fields(ReadOptions)}

    class Watched(ReadOptions):
        read: set[str]

        def __getattribute__(self, name: str) -> Any:
            if name in names:
                object.__getattribute__(self, "read").add(name)
            return super().__getattribute__(name)

    for kind, entry in FORMATS.items():
        options = Watched()
        object.__setattr__(options, "read", set())
        with pytest.raises(DatasetError):  # an empty file is refused by every format
            entry.read([], "empty", options)
        if entry.read_directory is not None:
            with pytest.raises(DatasetError):
                entry.read_directory(tmp_path, options)
        assert options.read == set(entry.takes), kind
        assert set(entry.takes) <= names


def accepts(hint: Any, given: Any) -> bool:
    """Whether a parameter annotated `hint` takes what is annotated `given`."""
    return hint == given or given in typing.get_args(hint)


def parameter_types(function: Any) -> dict[str, Any]:
    """A function's parameters by name with their types, the keywords of a `**kw: Unpack[...]`
    (a TypedDict) among them."""
    hints = typing.get_type_hints(function)
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind is parameter.VAR_KEYWORD:
            (keywords,) = typing.get_args(hints.pop(parameter.name))
            hints |= typing.get_type_hints(keywords)
    return hints


def test_every_entry_names_a_reader_called_as_its_entry_calls_it():
    """The table names its readers ("module:function") and imports one on its format's first
    read, so neither mypy nor import-linter sees that import or that call: this is their check.
    Each reader is there, takes a file's lines and name (a directory reader, its path), then
    its entry's options by their names and types in ReadOptions, needs nothing else, and
    returns what a format reads."""
    options = typing.get_type_hints(ReadOptions)
    for kind, entry in FORMATS.items():
        called = [(entry.reader, [Iterable[bytes], str], {TraceDataset, DagDataset})]
        if entry.directory_reader is not None:
            called.append((entry.directory_reader, [Path], {TraceDataset}))
        for name, given, returned in called:
            function = imported(name)
            signature = inspect.signature(function)
            signature.bind(*given, **dict.fromkeys(entry.takes))  # a TypeError if not
            hints = parameter_types(function)
            first = list(signature.parameters)[: len(given)]
            assert all(map(accepts, [hints[p] for p in first], given)), (kind, name)
            assert all(accepts(hints[t], options[t]) for t in entry.takes), (kind, name)
            assert hints["return"] in returned, (kind, name)
    assert {kind for kind, entry in FORMATS.items() if entry.read_directory} == {
        "raw_payload",
        "random_pool",
        "sagemaker_data_capture",
        "weka_trace",
    }


def test_a_worker_process_imports_no_format_reader():
    """A worker imports the CLI, whose choices are the table, but never reads a dataset: the
    readers load when a format is first read (together they take about 0.13 s to import)."""
    probe = (
        "import sys, dagperf.cli, dagperf.worker; "
        "print(sorted(m for m in sys.modules if m.startswith('dagperf.dataset.formats.')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
