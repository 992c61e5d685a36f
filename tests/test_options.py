"""One declaration per option: every flag of `profile` and `search` is a field of an options
model (`dagperf.options`) that is a Benchmark field, or is declared local-only with its reason;
an option added to a model from outside the package is a flag, a CRD field and a pod flag."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from pydantic.alias_generators import to_camel

from dagperf.cli import build_parser
from dagperf.options import CONCERNS, LOCAL_FLAGS, SEARCH
from dagperf.options.table import BEGIN, END, table
from dagperf.vocabulary.options import option
from dagperf_operator.crd import structural
from dagperf_operator.spec import BenchmarkSpec

ROOT = Path(__file__).resolve().parents[1]


def _command(name: str):
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return commands.choices[name]


def _declared(dest: str) -> tuple[str | None, str | None]:
    """A flag's Benchmark field (`section.field`), or why it has none."""
    for concern in (*CONCERNS.values(), SEARCH):
        prefix = concern.prefix.replace("-", "_")
        name = dest.removeprefix(prefix) if dest.startswith(prefix) else None
        if name in concern.model.model_fields:
            opt = option(concern.model.model_fields[name])
            if opt.local or concern.section is None:
                return None, opt.local
            return f"{to_camel(concern.section)}.{to_camel(opt.benchmark or name)}", None
    reason = next((why for key, why in LOCAL_FLAGS.items() if dest.startswith(key)), None)
    return None, reason


def test_every_flag_of_profile_and_search_is_a_benchmark_field_or_says_why_not():
    spec = structural(BenchmarkSpec)["properties"]
    seen = 0
    for command in ("profile", "search"):
        for action in _command(command)._actions:
            if action.dest == "help":
                continue
            field, reason = _declared(action.dest)
            assert field or reason, f"{command} {action.option_strings}: declared nowhere"
            if field:
                section, name = field.split(".")
                assert name in spec[section]["properties"], f"{field} is not in the CRD"
            seen += 1
    assert seen > 60  # the flags were walked at all


def test_the_options_table_of_kubernetes_md_is_current():
    page = (ROOT / "docs" / "kubernetes.md").read_text()
    committed = page[page.index(BEGIN) : page.index(END) + len(END)] + "\n"
    assert committed == table(), "python -m dagperf.options.table, into docs/kubernetes.md"


ADDED = """
import json, sys
from pydantic import Field, create_model
import dagperf.options as options
from dagperf.vocabulary.config import LoadConfig

# A plug-in's option: one field, on a model of its own, put in the table of concerns.
Load = create_model("Load", __base__=LoadConfig,
                    burst_size=(int | None, Field(default=None, ge=1, description="Per burst.")))
options.CONCERNS["load"] = options.Concern(Load, "load", "load")

from dagperf.cli import build_parser
from dagperf.cli.run_options import run_options
from dagperf_operator import pod_commands
from dagperf_operator.crd import structural
from dagperf_operator.settings import OperatorSettings
from dagperf_operator.spec import BenchmarkSpec

spec = BenchmarkSpec.model_validate({"endpoint": {"url": "http://llm:8000"},
    "dataset": {"configMapRef": {"name": "d"}}, "load": {"burstSize": 4}})
argv = pod_commands.scheduler_command("demo", spec, "d.jsonl", OperatorSettings())
parser = build_parser()
json.dump({
    "crd": sorted(structural(BenchmarkSpec)["properties"]["load"]["properties"]),
    "argv": argv,
    "parsed": run_options(parser, parser.parse_args(argv[1:])).load.burst_size,
}, sys.stdout)
"""


def test_an_option_added_from_outside_is_a_flag_a_benchmark_field_and_a_pod_flag():
    done = subprocess.run(
        [sys.executable, "-c", ADDED], capture_output=True, text=True, timeout=120, check=True
    )
    seen = json.loads(done.stdout)
    assert "burstSize" in seen["crd"]
    argv = seen["argv"]
    assert argv[argv.index("--burst-size") + 1] == "4"
    assert seen["parsed"] == 4
