"""TraceLab's agentic coding traces, with AIPerf 0.13 itself as the reference. AIPerf converts a
TraceLab file into Weka traces and replays those; dagperf must build the same traces (compared
with what AIPerf's own converter makes of the file) and put the same requests on the wire.

Both tools run each file against the same recording simulator, AIPerf with
`--no-fixed-schedule` (by itself it would put the file on a fixed schedule, send each sub-agent
twice and stop at the line count: dagperf replays what AIPerf replays without that), dagperf
counting prompts in the tokenizer AIPerf counts them in, AIPerf asked for the `ignore_eos`
dagperf sends by default. The text differs (each tool cuts its own corpus); the structure must
not: the same conversations and turns, each with the same messages (roles and lengths in
tokens) and body fields, the same shared prefix between every two requests, and dagperf's
dependencies held by AIPerf's timing. Every file AIPerf refuses, dagperf refuses at its line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import msgspec
import pytest

from dagperf.dataset import DatasetError
from dagperf.dataset.formats.tracelab import traces_of
from dagperf.sources import load_graph

import aiperf_reference as reference

pytestmark = pytest.mark.aiperf

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "aiperf_cases" / "tracelab"
FILES = {  # a TraceLab file: the root conversations it becomes, which both tools run
    ROOT / "examples" / "traces" / "tracelab.jsonl": 2,
    # Two windows hold one sub-agent (the narrower wins), a sub-agent's sub-agent stays a root,
    # a sub-agent spawned before its parent's first request is a root after all the others, a
    # Codex window, and rows AIPerf passes over (one without a time, one without a session).
    CASES / "shapes.jsonl": 5,
}
# AIPerf's own reading and conversion (its loader's steps, in its order), in its interpreter.
CONVERT = """\
import json, sys
from pathlib import Path
from types import SimpleNamespace
from aiperf.common.environment import Environment
from aiperf.dataset.loader import _tracelab_convert as tracelab
from aiperf.dataset.loader.tracelab_trace import TraceLabTraceDatasetLoader as Loader

loader = SimpleNamespace(_block_size=64, warning=lambda *args: None)
loader._add_trace = lambda traces, blob, sid: Loader._add_trace(loader, traces, blob, sid)
out = {}
for path in sys.argv[1:]:
    sessions = Loader._read_sessions(loader, Path(path))
    links, stats = tracelab.build_join_index(
        sessions,
        min_spawn_ms=Environment.DATASET.TRACELAB_MIN_SPAWN_MS,
        enable_codex=Environment.DATASET.TRACELAB_CODEX_SUBAGENT_JOIN,
    )
    children = tracelab.group_children_by_parent(sessions, links, stats)
    nested = {child for kids in children.values() for child in kids}
    traces = Loader._build_traces(loader, sessions, children, nested)
    out[path] = [t.model_dump(mode="json", by_alias=True) for t in traces.values()]
print(json.dumps(out))
"""


def test_the_same_weka_traces_as_aiperf_converts():
    files = [str(path) for path in sorted(FILES)]
    done = subprocess.run(
        [str(reference.python()), "-c", CONVERT, *files], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for path, theirs in json.loads(done.stdout).items():
        with open(path, "rb") as f:
            ours = [msgspec.to_builtins(trace) for _, _, trace in traces_of(f, path)]
        assert ours == theirs, path


@pytest.mark.parametrize("data", sorted(FILES), ids=lambda p: p.name)
async def test_the_same_structure_as_aiperf(data, tmp_path):
    flags = ("--concurrency", "1", "--num-conversations", str(FILES[data]))
    tokenizer = reference.tokenizer()
    theirs = await reference.aiperf(
        data, "tracelab", "--no-fixed-schedule", *flags, "--extra-inputs", "ignore_eos:true"
    )
    ours = await reference.dagperf(
        data, "tracelab", tmp_path, *flags, "--tokenizer", str(tokenizer)
    )
    assert ours.returncode == 0, ours.log[-3000:]
    assert reference.agent_wire_differences(ours, theirs, tokenizer) == []
    # The same sub-agents, spawned from the same conversations.
    assert _depths(ours) == _depths(theirs)


def _depths(run: reference.Recording) -> list[tuple[str, int, int]]:
    return sorted((r["conversation_id"], r["turn_index"], r["agent_depth"]) for r in run.records)


REFUSED = {  # file: (line, what dagperf says); AIPerf refuses each too
    "byte-order-mark": (1, "invalid JSON: a byte-order mark opens the file"),
    "invalid-json": (2, "invalid JSON:"),
    "no-session": (None, "no TraceLab sessions: every row needs a session_id"),
    "no-timed-round": (None, "no session has a round with a time"),
    "not-an-object": (2, "expected a JSON object (one round per line), got an array"),
    "not-a-time": (2, "timing_events.1.timestamp: not an ISO 8601 time: 'yesterday'"),
    "one-trace-id-twice": (2, "session_id: 'claude/a' makes the trace id 'claude_a'"),
    "session-id-number": (2, "session_id: Input should be a valid string"),
    "time-as-number": (1, "tools.0.emitted_at: Input should be an ISO 8601 time string"),
    "tool-name-list": (1, "tools.0.tool_name: Input should be a valid string"),
    "two-sub-agents-one-id": (1, "requests.2.agent_id: agent_id 'claude_c_1' is also"),
}


def test_every_refused_case_is_listed():
    assert sorted(p.stem for p in (CASES / "refused").glob("*.jsonl")) == sorted(REFUSED)


@pytest.mark.parametrize("name", sorted(REFUSED))
async def test_what_aiperf_refuses_dagperf_refuses_at_its_line(name):
    path = CASES / "refused" / f"{name}.jsonl"
    returncode, log = await reference.aiperf_verdict(
        path, "tracelab", "--no-fixed-schedule", "--concurrency", "1", "--num-conversations", "1"
    )
    assert returncode != 0, log[-2000:]
    with pytest.raises(DatasetError) as caught:
        load_graph(path, "tracelab")
    line, says = REFUSED[name]
    found = [(p.line, p.message) for p in caught.value.problems]
    assert any(at == line and message.startswith(says) for at, message in found), found
