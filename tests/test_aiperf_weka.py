"""Weka's coding-agent traces, with AIPerf 0.13 itself as the reference. Both tools run each
trace against the same recording simulator, dagperf counting prompts in the tokenizer AIPerf
counts them in, and AIPerf asked for the `ignore_eos` dagperf sends by default. The text differs
(each tool cuts its own corpus); the structure must not: the same requests of the same
conversations and turns, each with the same messages (roles and lengths in tokens), limits and
body fields, the same shared prefix between every two requests, and dagperf's dependencies held
by AIPerf's timing. Every trace AIPerf refuses, dagperf refuses at its line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dagperf.dataset import DatasetError
from dagperf.sources import load_graph

import aiperf_reference as reference

pytestmark = pytest.mark.aiperf

CASES = Path(__file__).resolve().parent / "aiperf_cases" / "weka"
TRACES = {  # a trace or a directory of them: the root conversations both tools run
    "s1-subagent.json": 1,
    "s2-prefix.json": 1,
    "s2b-flatsplit.json": 1,
    "s4-overlap.json": 1,
    "s5-tiered.json": 1,
    "sub-agent-first.json": 1,
    "background.json": 1,
    "dir2": 2,
    "dir-bg": 2,
}


@pytest.mark.parametrize("name", sorted(TRACES))
async def test_the_same_structure_as_aiperf(name, tmp_path):
    data, flags = CASES / name, ("--concurrency", "1", "--num-conversations", str(TRACES[name]))
    tokenizer = reference.tokenizer()
    theirs = await reference.aiperf(data, "weka_trace", *flags, "--extra-inputs", "ignore_eos:true")
    ours = await reference.dagperf(
        data, "weka_trace", tmp_path, *flags, "--tokenizer", str(tokenizer)
    )
    assert ours.returncode == 0, ours.log[-3000:]
    assert reference.agent_wire_differences(ours, theirs, tokenizer) == []


REFUSED = {  # file: (line, what dagperf says); AIPerf refuses each too
    "empty": (8, "requests: a trace needs at least one request"),
    "global-scope": (8, "hash_id_scope: Input should be 'local'"),
    "missing-id": (1, "id: Field required"),
    "missing-in": (141, "requests.3.in: Field required"),
    "nested-subagent": (139, "requests.2.requests.2: Input tag 'subagent' found"),
    "prefix-too-long": (15, "requests.0.hash_ids: 2 block ids cannot hold the system prefix"),
    "ttft-on-a-normal-call": (79, "requests.1.ttft: Extra inputs are not permitted"),
    "two-agents-one-id": (65, "requests.2.agent_id: agent_id 'a' is also the sub-agent's"),
    "unknown-key": (79, "requests.1.latency: Extra inputs are not permitted"),
    "unknown-type": (12, "requests.0: Input tag 'x' found using 'type' does not match"),
    "zero-block-size": (7, "block_size: Input should be greater than 0"),
}
# Refused by AIPerf's own schema (its pydantic model); the others when it loads or runs them.
SCHEMA = {n for n in REFUSED if n not in {"empty", "prefix-too-long", "two-agents-one-id"}}


def test_every_refused_case_is_listed():
    assert sorted(p.stem for p in (CASES / "refused").glob("*.json")) == sorted(REFUSED)


@pytest.fixture(scope="module")
def schema_verdicts() -> dict[str, bool]:
    """Whether AIPerf's weka model accepts each schema case."""
    script = (
        "import json, sys\n"
        "from aiperf.dataset.loader.weka_trace_models import WekaTrace\n"
        "out = {}\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        WekaTrace.model_validate_json(open(path).read()); out[path] = True\n"
        "    except Exception:\n"
        "        out[path] = False\n"
        "print(json.dumps(out))\n"
    )
    files = [str(CASES / "refused" / f"{name}.json") for name in sorted(SCHEMA)]
    done = subprocess.run(
        [str(reference.python()), "-c", script, *files], capture_output=True, text=True, check=True
    )
    return {Path(k).stem: v for k, v in json.loads(done.stdout).items()}


@pytest.mark.parametrize("name", sorted(REFUSED))
async def test_what_aiperf_refuses_dagperf_refuses_at_its_line(name, schema_verdicts):
    path = CASES / "refused" / f"{name}.json"
    if name in SCHEMA:
        assert schema_verdicts[name] is False
    else:
        returncode, log = await reference.aiperf_verdict(
            path, "weka_trace", "--concurrency", "1", "--num-conversations", "1"
        )
        assert returncode != 0, log[-2000:]
    with pytest.raises(DatasetError) as caught:
        load_graph(path, "weka_trace")
    line, says = REFUSED[name]
    found = [(p.line, p.message) for p in caught.value.problems]
    assert any(at == line and message.startswith(says) for at, message in found), found
