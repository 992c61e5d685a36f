"""The agentic examples on a real serving stack: llama-server engines behind vLLM Router
(`consistent_hash`, dagperf's default headers), the relays naming who served each request.

An orchestrator spine runs its rounds one after another, each child a SPAWN of its own. The
coding-agent example (bench/agent_traces.py's, small enough for the tiny model's context) replays
with its prompts built in the engine's own tokens (a tokenizer with a token per character, as
the tiny model has): every prompt is as long as its recorded `in` plus the chat template's
tokens, every reply as long as its `out`, each conversation stays on one engine, and the main
agent finds the prompt its earlier turns left cached.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from engine_stack import ENGINE_HEADER, Engines, Router
from runs import Run, read_jsonl

pytestmark = pytest.mark.engine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "routing"))
import char_tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def profile(url: str, directory: Path, data: Path, *flags: str) -> Run:
    artifacts = directory / "artifacts"
    command = [sys.executable, "-m", "dagperf", "profile", "--input-file", str(data), "--url", url]
    command += ["--artifact-dir", str(artifacts), "--quiet", "--workers", "1", *flags]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    run = Run(done.returncode, done.stdout, done.stderr, artifacts)
    assert run.returncode == 0, run.stdout + run.stderr
    run.records = read_jsonl(artifacts / "profile_export.jsonl")
    run.summary = json.loads((artifacts / "profile_export_aiperf.json").read_text())
    return run


def test_a_spine_runs_its_rounds_one_after_another(engines: Engines, tmp_path: Path):
    with Router.start("consistent_hash", engines.relays, tmp_path / "router.log") as router:
        run = profile(router.url, tmp_path, ROOT / "examples" / "agentic" / "spine.dag.jsonl",
                      "--extra-inputs", "ignore_eos:true")  # fmt: skip
    assert run.summary is not None and run.summary["error_request_count"]["avg"] == 0
    assert run.branch_stats == {
        **dict.fromkeys(run.branch_stats, 0),
        "children_spawned": 6, "children_completed": 6,
        "parents_suspended": 3, "parents_resumed": 3,
    }  # fmt: skip
    rounds: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in run.records:
        rounds[record["metadata"]["branch_id"]].append(record["metadata"])
    order = ["planner:0", "planner:1", "planner:2"]
    assert sorted(rounds) == order and all(len(rounds[r]) == 3 for r in order)
    for before, after in itertools.pairwise(order):
        ended = max(m["request_end_ns"] for m in rounds[before])
        assert min(m["request_start_ns"] for m in rounds[after]) > ended


@pytest.fixture(scope="module")
def trace_run(engines: Engines, tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Path]:
    directory = tmp_path_factory.mktemp("coding-agent")
    traces = ROOT / "examples" / "agentic" / "coding-agent"
    tokenizer = char_tokenizer.write(directory / "tokenizer.json")
    with Router.start("consistent_hash", engines.relays, directory / "router.log") as router:
        run = profile(
            router.url, directory, traces, "--custom-dataset-type", "weka_trace",
            "--tokenizer", str(tokenizer), "--backend-header", ENGINE_HEADER, "--streaming",
            "--concurrency", "1",
        )  # fmt: skip
    return run, traces


def test_a_coding_agent_trace_replays_its_lengths_on_a_real_engine(trace_run, engines: Engines):
    """Every prompt is its recorded `in` tokens exactly, and the chat template's own (which the
    engine tells: its template applied to the same roles with nothing in them), every reply
    its `out`."""
    run, traces = trace_run
    template: dict[tuple[str, ...], int] = {}
    assert run.summary is not None and run.summary["error_request_count"]["avg"] == 0
    recorded = _recorded(traces)
    assert len(run.records) == len(recorded)
    for record in run.records:
        meta, metrics = record["metadata"], record["metrics"]
        tokens_in, tokens_out, roles = recorded[(meta["conversation_id"], meta["turn_index"])]
        assert metrics["output_sequence_length"]["value"] == max(tokens_out, 1), meta
        if roles not in template:
            empty = [{"role": role, "content": ""} for role in roles]
            prompt = engines.post(0, "/apply-template", {"messages": empty})["prompt"]
            tokens = engines.post(0, "/tokenize", {"content": prompt, "add_special": True})
            template[roles] = len(tokens["tokens"])
        assert metrics["usage_prompt_tokens"]["value"] == tokens_in + template[roles], meta
    health = json.loads((run.directory / "health_check.json").read_text())
    (lengths,) = [c for c in health["checks"] if c["name"] == "output_length"]
    assert lengths["status"] == "pass", lengths


def test_sub_agents_are_spawn_children_and_each_conversation_stays_home(trace_run):
    run, _ = trace_run
    engines: dict[str, set[str]] = defaultdict(set)
    correlation: dict[str, str] = {}
    for record in run.records:
        meta = record["metadata"]
        engines[meta["x_correlation_id"]].add(meta["backend"])
        if meta["agent_depth"] == 0:
            correlation[meta["root_correlation_id"]] = meta["x_correlation_id"]
    assert all(len(served) == 1 for served in engines.values()), engines
    children = [r["metadata"] for r in run.records if r["metadata"]["agent_depth"] == 1]
    assert children and all(m["branch_mode"] == "spawn" for m in children)
    assert all(m["parent_correlation_id"] == correlation[m["root_correlation_id"]]
               for m in children)  # fmt: skip
    assert run.branch_stats["children_spawned"] == len({m["x_correlation_id"] for m in children})


def test_the_main_agent_finds_its_earlier_turns_cached(trace_run):
    """Each main-agent turn after the first sends its earlier prompt again (but the reply,
    synthetic, and a cut-back partial block): on its one engine most of it is cached."""
    run, _ = trace_run
    later = [
        record["metrics"]
        for record in run.records
        if record["metadata"]["agent_depth"] == 0 and record["metadata"]["turn_index"] > 0
    ]
    cached = sum(m["usage_prompt_cache_read_tokens"]["value"] for m in later)
    prompts = sum(m["usage_prompt_tokens"]["value"] for m in later)
    assert cached > 0.5 * prompts, (cached, prompts)


def _recorded(traces: Path) -> dict[tuple[str, int], tuple[int, int, tuple[str, ...]]]:
    """Each request's recorded in and out, and its messages' roles, by conversation and
    turn, for the traces as dagperf splits them (from its own plan of each file)."""
    from dagperf.dataset.formats.agent_traces import decode
    from dagperf.dataset.formats.agent_traces.buffer import Request, conversation_messages
    from dagperf.dataset.formats.agent_traces.plan import plan

    out = {}
    for path in traces.glob("*.json"):
        trace = decode(path.read_bytes())
        for conversation in plan(trace).conversations:
            calls = [call for _, call in conversation.calls]
            requests = [Request(c.hash_ids, c.tokens_in, c.tokens_out) for c in calls]
            turns = conversation_messages(requests, trace.block_size, conversation.prefix_tokens)
            for k, (call, messages) in enumerate(zip(calls, turns, strict=True)):
                roles = tuple(m.role for m in messages)
                out[(conversation.session_id, k)] = (call.tokens_in, call.tokens_out, roles)
    return out
