"""weka_trace: what a coding-agent session compiles into (a main agent with its sub-agents as
SPAWN children, joins, waits), the messages rebuilt from block ids, the agents a flat list of
requests turns out to hold, a directory read in two processes, trees read again when run, and
every refusal by line. (The same requests as AIPerf's: tests/test_aiperf_weka.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dagperf.dataset import DatasetError
from dagperf.dataset.formats import FORMATS, ReadOptions
from dagperf.dataset.formats.agent_traces.buffer import Request, conversation_messages, token_count
from dagperf.dataset.formats.weka_trace import directory
from dagperf.graph import SessionKind
from dagperf.sources import load_graph

from dagfile import check_tree

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "aiperf_cases" / "weka"
EXAMPLE = ROOT / "examples" / "agentic" / "coding-agent"


def call(t: float, tokens_in: int, out: int, ids: list[int], **more) -> dict:
    return {"type": "n", "t": t, "model": "m", "in": tokens_in, "out": out, "hash_ids": ids, **more}


def trace(*requests: dict, **more) -> dict:
    return {"id": "s", "models": ["m"], "block_size": 64, "hash_id_scope": "local",
            "requests": list(requests), **more}  # fmt: skip


def graph_of(tmp_path: Path, document: dict, options: ReadOptions | None = None):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(document, indent=1))
    return load_graph(path, "weka_trace", options=options)


def names(tree) -> list[str]:
    return [f"{tree.sessions[n.session].conversation_id}:{n.turn}" for n in tree.nodes]


def test_a_session_is_its_main_agent_with_a_sub_agent_it_joins():
    graph = load_graph(CASES / "s1-subagent.json", "weka_trace")
    (tree,) = graph.trees
    check_tree(tree)
    _, child = tree.sessions
    assert (child.conversation_id, child.kind, child.depth) == (
        "s1-subagent::sa:agent_001",
        SessionKind.SPAWN,
        1,
    )
    nodes = dict(zip(names(tree), tree.nodes, strict=True))
    main = [nodes[f"s1-subagent:{k}"] for k in range(3)]
    sub = [nodes[f"s1-subagent::sa:agent_001:{k}"] for k in range(2)]
    # Started after main turn 1 (the last before its entry), its recorded offset later.
    assert sub[0].deps == (tree.nodes.index(main[1]),) and sub[0].delay_s == pytest.approx(0.5)
    # Main turn 2 is the first at or after its recorded end (7 + 6 s): it joins on it.
    assert main[2].join_deps == (tree.nodes.index(sub[1]),)
    # The recording's idle gaps: t less the previous call's t and api_time.
    assert [n.delay_s for n in main] == [0.0, 3.0, 8.0]
    assert sub[1].delay_s == pytest.approx(1.5)
    assert [n.payload.max_tokens for n in tree.nodes] == [200, 100, 150, 50, 80]
    assert graph.shape.sizes == [5] and graph.shape.spawn_children == 1


def test_messages_are_the_conversation_its_block_ids_make():
    graph = load_graph(CASES / "s2-prefix.json", "weka_trace")
    shapes = []
    for node in graph.trees[0].nodes:
        messages = json.loads(node.payload.wire_messages())
        shapes.append(" ".join(f"{m['role'][0]}{len(m['content'].split())}" for m in messages))
    assert shapes == [
        "u640",
        "u640 a64 u576",  # the reply before it, a block; the new blocks the user's
        "u640 a64 u64 a192 u40",  # pulled back to the 12 blocks shared, then grown again
        "u640 a64 u64 a192 a64 u576",  # the previous turn's partial block gone
        "u300",  # no block shared: a fresh conversation
    ]
    # Without a tokenizer, a word is a token: every prompt is as long as recorded.
    recorded = json.loads((CASES / "s2-prefix.json").read_text())["requests"]
    assert [sum(int(s[1:]) for s in shape.split()) for shape in shapes] == [
        r["in"] for r in recorded
    ]


def test_the_buffer_keeps_every_prompt_at_its_recorded_length():
    requests = [
        Request(list(range(10)), 700, 100),  # a partial block past its ids
        Request(list(range(20)), 1300, 300),
        Request([*range(12), 90, 91], 950, 50),  # pulled back
        Request([], 200, 10),  # no ids: all synthetic
    ]
    for prefix in (0, 300):
        turns = conversation_messages(requests, 64, prefix)
        assert [token_count(t, 64) for t in turns] == [r.tokens_in for r in requests]
        assert all(t[-1].role == "user" for t in turns)


def test_a_system_prefix_longer_than_the_ids_is_refused_at_its_line(tmp_path):
    document = trace(call(0, 1000, 10, [1, 2]), tool_tokens=500, system_tokens=100)
    with pytest.raises(DatasetError) as caught:
        graph_of(tmp_path, document)
    (problem,) = caught.value.problems
    assert problem.line == 15 and problem.message.startswith(
        "requests.0.hash_ids: 2 block ids cannot hold the system prefix of 600"
    )


def test_flat_requests_of_two_agents_become_a_root_and_a_child():
    (tree,) = load_graph(CASES / "s2b-flatsplit.json", "weka_trace").trees
    assert [s.conversation_id for s in tree.sessions] == ["s2b-flatsplit", "s2b-flatsplit::fa:000"]
    assert names(tree).count("s2b-flatsplit::fa:000:1") == 1


def test_a_side_call_on_another_model_is_an_aux_child(tmp_path):
    ids = list(range(1, 11))
    document = trace(
        call(0, 640, 10, ids, api_time=0.1),
        {**call(1, 500, 5, [500, 501], api_time=0.1), "model": "small"},
        call(2, 1000, 10, [*ids, 11, 12, 13, 14, 15], api_time=0.1),
    )
    (tree,) = graph_of(tmp_path, document).trees
    assert [s.conversation_id for s in tree.sessions] == ["s", "s::aux:000"]


def test_think_time_only_paces_by_the_recorded_think_times():
    options = ReadOptions(think_time_only=True)
    (tree,) = load_graph(CASES / "s1-subagent.json", "weka_trace", options=options).trees
    assert [n.delay_s for n in tree.nodes[:3]] == [0.0, 2.5, 0.8]


def test_replies_run_as_long_as_recorded_on_the_apis_that_take_it():
    assert FORMATS["weka_trace"].extra_inputs == {"ignore_eos": True}
    ran = subprocess.run(
        [sys.executable, "-m", "dagperf", "validate", str(EXAMPLE),
         "--custom-dataset-type", "weka_trace"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_a_directory_is_its_sessions_read_in_two_processes_as_in_one(tmp_path, monkeypatch):
    for i in range(6):
        document = json.loads((CASES / "s1-subagent.json").read_text())
        document["id"] = f"s{i}"
        (tmp_path / f"{i}.json").write_text(json.dumps(document))
    (tmp_path / "notes.txt").write_text("not a trace")
    alone = load_graph(tmp_path, "weka_trace")
    monkeypatch.setattr(directory, "SPLIT_FILES", 2)
    forked = load_graph(tmp_path, "weka_trace")
    for graph in (alone, forked):
        assert graph.shape.sizes == [5] * 6 and graph.shape.conversations == 12
        assert [t.root.conversation_id for t in graph.trees] == [f"s{i}" for i in range(6)]


def test_a_directory_s_problems_name_their_files_and_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(directory, "SPLIT_FILES", 2)
    good = json.loads((CASES / "s1-subagent.json").read_text())
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.json").write_text(json.dumps(good, indent=1))
    (tmp_path / "d.json").write_text('{"id": "x",\n "block_size": "64"}')
    with pytest.raises(DatasetError) as caught:
        load_graph(tmp_path, "weka_trace")
    found = [(Path(p.source).name, p.line, p.message) for p in caught.value.problems]
    assert ("b.json", 2, "id: 's1-subagent' is also the session of "
            f"{tmp_path / 'a.json'}: one file each") in found  # fmt: skip
    assert ("d.json", 2, "block_size: Input should be a valid integer") in found
    assert ("d.json", 1, "models: Field required") in found


def test_a_session_is_read_again_when_run_and_a_changed_file_fails_it(tmp_path):
    for name in ("a", "b"):
        document = json.loads((CASES / "s1-subagent.json").read_text())
        document["id"] = name
        (tmp_path / f"{name}.json").write_text(json.dumps(document))
    graph = load_graph(tmp_path, "weka_trace")
    assert graph.trees[1].root.conversation_id == "b"
    (tmp_path / "b.json").write_text("{}")
    with pytest.raises(DatasetError, match="changed since it was loaded"):
        graph.trees[1]


def test_the_example_sessions_are_the_generator_s(tmp_path):
    """examples/agentic/coding-agent is what bench/agent_traces.py makes from its seed."""
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "agent_traces.py"), str(tmp_path), *EXAMPLE_FLAGS],
        check=True, capture_output=True,
    )  # fmt: skip
    made = {p.name: p.read_text() for p in tmp_path.glob("*.json")}
    assert made == {p.name: p.read_text() for p in EXAMPLE.glob("*.json")}


EXAMPLE_FLAGS = ["--sessions", "2", "--seed", "3", "--turns", "6", "9", "--scale", "0.05",
                 "--time-scale", "0.02"]  # fmt: skip


async def test_the_example_runs_with_its_sub_agents_as_spawn_children(tmp_path):
    """The coding-agent example against the simulator (three backends, sticky on the session
    key): every request of the trace once, its sub-agents SPAWN children of their main agent
    in the records and BranchStats, its conversations each on one backend, a critical path per
    session, and no inputs.json (its prompts are built as they are sent)."""
    from dagperf.simulator import SimConfig, running_simulator

    from runs import finish, spawn

    recorded = sum(
        len(r.get("requests", [r])) for p in EXAMPLE.glob("*.json")
        for r in json.loads(p.read_text())["requests"]
    )  # fmt: skip
    config = SimConfig(model="m", backends=3, ttft_ms=1, itl_ms=0.2, record_bodies=True)
    async with running_simulator(config) as sim:
        out = tmp_path / "artifacts"
        process = await spawn(
            "profile", "--input-file", str(EXAMPLE), "--custom-dataset-type", "weka_trace",
            "--url", sim.url, "--model", "m", "--backend-header", "x-backend",
            "--artifact-dir", str(out), "--quiet",
        )  # fmt: skip
        run = await finish(process, out, sim)
    assert run.returncode == 0, run.stderr
    assert len(run.records) == recorded and not (out / "inputs.json").exists()
    children = {r["metadata"]["x_correlation_id"]: r["metadata"] for r in run.records
                if r["metadata"]["agent_depth"] == 1}  # fmt: skip
    mains = {r["metadata"]["root_correlation_id"]: r["metadata"]["x_correlation_id"]
             for r in run.records if r["metadata"]["agent_depth"] == 0}  # fmt: skip
    assert children and all(m["branch_mode"] == "spawn" for m in children.values())
    assert all(m["parent_correlation_id"] == mains[m["root_correlation_id"]]
               for m in children.values())  # fmt: skip
    assert all(r["metrics"]["output_sequence_length"]["value"] == r["metadata"]["max_tokens"]
               for r in run.records)  # fmt: skip
    summary = run.summary
    assert summary is not None
    assert summary["branch_stats"]["children_spawned"] == len(children)
    assert summary["branch_stats"]["children_completed"] == len(children)
    assert summary["dag_report"]["by_branch_mode"]["spawn"]["requests"] == sum(
        1 for r in run.records if r["metadata"]["agent_depth"] == 1
    )
    backends: dict[str, set[str]] = {}
    for r in run.records:
        backends.setdefault(r["metadata"]["x_correlation_id"], set()).add(r["metadata"]["backend"])
    assert all(len(b) == 1 for b in backends.values())
    sessions = [json.loads(line) for line in (out / "session_export.jsonl").open()]
    assert len(sessions) == 2 and all(s["critical_path"]["path"] for s in sessions)
