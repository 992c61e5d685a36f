"""AIPerf 0.13's agentic dag_jsonl, with AIPerf itself as the reference: the same file puts the
same requests on the wire from both tools (bodies, and the order dagperf's dependencies
promise), the same think times are drawn from the same seed, and every file AIPerf refuses
dagperf refuses too, at its line, with the reason. Round and think-time gaps are measured by
bench/agentic_timing.py, not asserted here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dagperf.dataset import DatasetError
from dagperf.engine.think import ThinkTimes
from dagperf.graph import Gate
from dagperf.sources import load_graph

import aiperf_reference as reference

pytestmark = pytest.mark.aiperf

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "aiperf_cases"
ONE_ROOT = ("--concurrency", "1", "--num-conversations", "1")
SAME_AS_AIPERF = {  # file: the load both tools run it with
    ROOT / "examples" / "agentic" / "spine.dag.jsonl": ONE_ROOT,
    CASES / "spine-list.dag.jsonl": ONE_ROOT,
    CASES / "lognormal.dag.jsonl": (*ONE_ROOT, "--random-seed", "5"),
    CASES / "fire-and-forget.dag.jsonl": ("--concurrency", "1", "--num-conversations", "3"),
    CASES / "context-and-tools.dag.jsonl": ONE_ROOT,
    CASES / "join-delay.dag.jsonl": ONE_ROOT,
}


@pytest.mark.parametrize("data", sorted(SAME_AS_AIPERF), ids=lambda p: p.name)
async def test_the_same_requests_as_aiperf(data, tmp_path):
    flags = SAME_AS_AIPERF[data]
    theirs = await reference.aiperf(data, "dag_jsonl", *flags)
    ours = await reference.dagperf(data, "dag_jsonl", tmp_path / "out", *flags)
    assert ours.returncode == 0, ours.log[-3000:]
    assert reference.multiset(ours.bodies()) == reference.multiset(theirs.bodies())
    assert reference.edges_held(ours, theirs) == []

    # The same sessions and turns, at the same depths, on either side's records.
    def sessions(run: reference.Recording) -> list[tuple[str, int, int]]:
        return sorted(
            (r["conversation_id"], r["turn_index"], r["agent_depth"]) for r in run.records
        )

    assert sessions(ours) == sessions(theirs)


def test_think_times_are_the_draws_aiperf_makes_from_the_same_seed():
    """AIPerf's own generator (its interpreter, its random_generator module) against ours, for
    the keys a run uses: the run's place among the roots started, and the gate's turn."""
    cases = [(42, 0, 0, 0.8), (42, 0, 1, 0.8), (42, 3, 2, 0.8), (7, 1, 1, 2.5), (0, 5, 4, 0.1)]
    script = (
        "import json, math, sys\n"
        "from aiperf.common import random_generator as rng\n"
        "out = []\n"
        "for seed, ordinal, turn, sigma in json.loads(sys.argv[1]):\n"
        "    rng.reset(); rng.init(seed)\n"
        "    out.append(rng.derive(f'dag_think:{ordinal}:{turn}').normal(0.0, sigma))\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [str(reference.python()), "-c", script, json.dumps(cases)],
        capture_output=True,
        text=True,
        check=True,
    )
    normals = json.loads(done.stdout)
    median_s = 0.12
    for (seed, ordinal, turn, sigma), normal in zip(cases, normals, strict=True):
        ours = ThinkTimes(seed).draw(Gate(sigma=sigma), median_s, ordinal, turn)
        assert ours == pytest.approx(median_s * 2.718281828459045**normal, rel=1e-12)


REFUSED = {  # file: (line, what dagperf's message says), every file AIPerf's loader refuses too
    "rounds-not-orchestrator": (1, "rounds: only an orchestrator has rounds"),
    "spawns-not-orchestrator": (1, "spawns: conversation-level spawns belong to an orchestrator"),
    "think-not-orchestrator": (2, "think_time_ms: think times belong to an orchestrator"),
    "orchestrator-with-turns": (1, "turns: an orchestrator authors no turns"),
    "orchestrator-without-spawns": (2, "spawns: an orchestrator needs the children it starts"),
    "orchestrator-empty-rounds": (1, "rounds: List should have at least 1 item"),
    "rounds-list-and-spawns": (1, "with a list of rounds each round names its own spawns"),
    "rounds-share-a-child": (1, "rounds[1].spawns: child 'a' is also in round 0"),
    "zero-rounds": (1, "rounds: Input should be greater than or equal to 1"),
    "boolean-rounds": (1, "rounds: must be a count (an integer of at least 1) or a list"),
    "boolean-think": (1, "think_time_ms: Input should be a valid number"),
    "boolean-round-think": (1, "rounds.0.think_time_ms: Input should be a valid number"),
    "think-without-rounds": (1, "think_time_ms: the wait before each round needs rounds"),
    "sigma-without-median": (1, "think_time_sigma: needs think_time_ms"),
    "clamp-without-sigma": (1, "think_time_max_ms: bounds of a drawn think time need"),
    "clamps-out-of-order": (1, "think_time_min_ms: 300 is above think_time_max_ms 200"),
    "sigma-out-of-range": (1, "think_time_sigma: Input should be less than or equal to 10"),
    "orchestrator-pre-session": (1, "pre_session_spawns: not on an orchestrator"),
    "orchestrator-unknown-child": (1, "branch target 'ghost' not declared"),
    "child-twice": (1, "spawns: child 'a' is listed twice"),
    "round-without-spawns": (1, "rounds.1.spawns: List should have at least 1 item"),
    "unknown-key": (1, "think_time: Extra inputs are not permitted"),
    "unknown-round-key": (1, "rounds.0.think_ms: Extra inputs are not permitted"),
    "fork-target-isolated": (2, "session 'a' is a FORK target, but its context_mode"),
    "isolated-late-system": (1, "a 'system' message must be the first of its turn's messages"),
    "refused-context-mode": (1, "context mode 'message_array_without_responses' is not"),
    "unknown-context-mode": (1, "context_mode: Input should be 'deltas_without_responses'"),
}


@pytest.fixture(scope="module")
def aiperf_verdicts() -> dict[str, str | None]:
    """What AIPerf's own dag_jsonl loader says of each file: its error, or None."""
    files = sorted((CASES / "refused").glob("*.dag.jsonl"))
    script = (
        "import json, sys\n"
        "from aiperf.dataset.loader.dag_jsonl import DagJsonlLoader\n"
        "out = {}\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        DagJsonlLoader(path).load(); out[path] = None\n"
        "    except Exception as e:\n"
        "        out[path] = f'{type(e).__name__}: {e}'\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [str(reference.python()), "-c", script, *map(str, files)],
        capture_output=True,
        text=True,
        check=True,
    )
    return {
        Path(path).name.removesuffix(".dag.jsonl"): v for path, v in json.loads(done.stdout).items()
    }


def test_every_refused_case_is_listed(aiperf_verdicts):
    assert sorted(aiperf_verdicts) == sorted(REFUSED)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_aiperf_refuses_dagperf_refuses_at_its_line(name, aiperf_verdicts):
    assert aiperf_verdicts[name] is not None, f"AIPerf accepts {name}: not a refusal case"
    path = CASES / "refused" / f"{name}.dag.jsonl"
    with pytest.raises(DatasetError) as caught:
        load_graph(path, "dag_jsonl")
    line, says = REFUSED[name]
    found = [(p.line, p.message) for p in caught.value.problems]
    assert any(at == line and says in message for at, message in found), found
    assert all(str(p).startswith(f"{path}:") for p in caught.value.problems)
