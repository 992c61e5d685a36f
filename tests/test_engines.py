"""dagperf's serving claims on a real serving stack: llama.cpp's llama-server (three engines,
one request slot each, a tiny random-weight llama) behind vLLM Router, with a relay in front of
each engine logging what it received: the ground truth of where each request went, which the
router itself does not tell.

Each policy's run is one FORK workload of its own text (no engine has seen it), run once per
module and looked at by several tests: where the trees went by the ground truth, what dagperf
says about it, the prompt-cache reuse the engines reported, and the engines' own counters.
"""

from __future__ import annotations

import json
import random
import string
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dagperf.apis import APIS

import llama_native
from dagfile import conv, encode, turn, user
from engine_stack import ENGINE_HEADER, Engines, Router
from runs import Run, read_jsonl

pytestmark = pytest.mark.engine

CACHED = "llamacpp:prompt_tokens_cached_total"
MAX_TOKENS = 8


def text(rng: random.Random, chars: int) -> str:
    """Words of lowercase letters: printable ASCII, one token a character on the tiny model."""
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < chars:
        words.append("".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))))
    return " ".join(words)[:chars]


def fork_workload(
    salt: str, trees: int = 6, forks: int = 3, prompt_chars: int = 1000
) -> list[dict[str, Any]]:
    """Trees whose root asks a long question that `forks` children of two short turns each
    continue: a FORK child's prompt is mostly its parent's, cached where the parent ran. The
    text is drawn from `salt`, so no other run's prompts are in any engine's cache."""
    rng = random.Random(salt)
    lines = []
    for t in range(trees):
        kids = [f"{salt}-t{t}-f{k}" for k in range(forks)]
        root = turn(messages=[user(text(rng, prompt_chars))], max_tokens=MAX_TOKENS, forks=kids)
        lines.append(conv(f"{salt}-t{t}", root))
        for kid in kids:
            steps = [turn(messages=[user(text(rng, 12))], max_tokens=MAX_TOKENS) for _ in range(2)]
            lines.append(conv(kid, *steps))
    return lines


def profile(
    url: str,
    directory: Path,
    lines: list[dict[str, Any]],
    *flags: str,
    env: dict[str, str] | None = None,
) -> Run:
    """`dagperf profile` as a user runs it, one root tree at a time, EOS ignored."""
    directory.mkdir(parents=True, exist_ok=True)
    dataset = directory / "data.dag.jsonl"
    dataset.write_bytes(b"".join(encode(*lines)))
    artifacts = directory / "artifacts"
    command = [sys.executable, "-m", "dagperf", "profile", "--input-file", str(dataset)]
    command += ["--url", url, "--artifact-dir", str(artifacts), "--quiet", "--workers", "1"]
    command += ["--extra-inputs", "ignore_eos:true", *flags]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, check=False, env=env
    )
    run = Run(done.returncode, done.stdout, done.stderr, artifacts)
    if (artifacts / "profile_export.jsonl").exists():
        run.records = read_jsonl(artifacts / "profile_export.jsonl")
    if (artifacts / "profile_export_aiperf.json").exists():
        run.summary = json.loads((artifacts / "profile_export_aiperf.json").read_text())
    return run


def fork_reuse(run: Run) -> dict[str, Any]:
    """The summary's FORK-child reuse: the share of the prompt tokens of FORK children's first
    requests that the engines reported cached, for the run and per tree."""
    assert run.summary is not None
    reuse: dict[str, Any] = run.summary["fork_reuse"]
    assert reuse["requests"] == 18 and reuse["unreported"] == 0  # 6 trees of 3 children
    return reuse


def output_length_check(run: Run) -> dict[str, Any]:
    health = json.loads((run.directory / "health_check.json").read_text())
    (check,) = [c for c in health["checks"] if c["name"] == "output_length"]
    return check


@dataclass
class PolicyRun:
    policy: str
    run: Run
    served_by: dict[str, str]  # X-Request-ID -> engine, by the relays
    cached_on_engines: float  # the engines' own counter, over the run
    processed: Counter[str]  # the router's requests per engine
    relayed: Counter[str]  # the relays' requests per engine, over the run

    def trees(self) -> dict[str, set[str]]:
        """Each FORK tree's engines by the ground truth (each root here forks, spawns none)."""
        engines: dict[str, set[str]] = defaultdict(set)
        for record in self.run.records:
            meta = record["metadata"]
            engines[meta["root_correlation_id"]].add(self.served_by[meta["x_request_id"]])
        return engines


@pytest.fixture(scope="module")
def policy_run(
    engines: Engines, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], PolicyRun]:
    """The FORK workload through vLLM Router with one policy, run the first time a test asks
    for that policy. With dagperf's default flags: no affinity flag. Runs under round_robin
    give dagperf no backend header, so nothing it sees names an engine."""
    done: dict[str, PolicyRun] = {}

    def get(policy: str) -> PolicyRun:
        if policy not in done:
            directory = tmp_path_factory.mktemp(policy)
            flags = ["--concurrency", "1"]
            if policy != "round_robin":
                flags += ["--backend-header", ENGINE_HEADER]
            before, logged = engines.counters(), Counter(r["engine"] for r in engines.requests())
            with Router.start(policy, engines.relays, directory / "router.log") as router:
                run = profile(router.url, directory, fork_workload(policy), *flags)
                processed = router.processed()
            assert run.returncode == 0, run.stdout + run.stderr
            relayed = Counter(r["engine"] for r in engines.requests()) - logged
            cached = engines.counters()[CACHED] - before[CACHED]
            by_worker = Counter(
                {f"engine-{engines.relays.index(w)}": n for w, n in processed.items()}
            )
            done[policy] = PolicyRun(policy, run, engines.served_by(), cached, by_worker, relayed)
        return done[policy]

    return get


def test_the_tiny_model_replies_in_characters_that_retokenize_to_its_tokens(engines: Engines):
    """A reply's text, sent back as history, is the same tokens again: the reason a FORK
    child's prompt can start with exactly its parent's cached tokens."""
    for seed in range(3):
        prompt = text(random.Random(seed), 200)
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 40}
        answer = engines.post(0, "/v1/chat/completions", body | {"ignore_eos": True})
        reply = answer["choices"][0]["message"]["content"]
        assert answer["usage"]["completion_tokens"] == 40
        assert len(reply) == 40 and set(reply) <= set(string.printable), repr(reply)
        tokens = engines.post(0, "/tokenize", {"content": reply, "add_special": False})["tokens"]
        assert len(tokens) == 40
        assert engines.post(0, "/detokenize", {"tokens": tokens})["content"] == reply


def test_consistent_hash_keeps_every_fork_tree_on_one_engine_with_default_flags(policy_run):
    """vLLM Router's consistent_hash reads X-Session-ID: dagperf's default headers carry the
    FORK tree's key there, so every tree stays on one engine, whose prompt cache then serves
    the children; dagperf's own view of it matches the relays'."""
    result = policy_run("consistent_hash")
    run, summary = result.run, result.run.summary
    assert summary is not None and summary["error_request_count"]["avg"] == 0
    trees = result.trees()
    assert len(trees) == 6 and all(len(engines) == 1 for engines in trees.values()), trees
    for record in run.records:  # dagperf names the engine the relay saw, request by request
        meta = record["metadata"]
        assert meta["backend"] == result.served_by[meta["x_request_id"]]
    locality = summary["backend_locality"]
    assert locality["method"] == f"header:{ENGINE_HEADER}"
    assert locality["trees"] == locality["trees_on_one_backend"] == 6
    assert locality["requests_off_home_backend"] == 0
    reuse = fork_reuse(run)
    assert reuse["share"] >= 0.8 and reuse["per_tree"]["min"] >= 0.8, reuse
    assert result.processed == result.relayed  # the router's counters agree with the relays


def test_round_robin_scatters_fork_trees_and_their_children_lose_the_cache(policy_run):
    """Round robin sends a tree's siblings, which arrive together, to every engine: only the
    one that lands where the parent ran finds its prefix."""
    sticky, spread = policy_run("consistent_hash"), policy_run("round_robin")
    trees = spread.trees()
    assert len(trees) == 6
    assert not any(len(engines) == 1 for engines in trees.values()), trees
    scattered = fork_reuse(spread.run)["share"]
    assert scattered < 0.5 and scattered < fork_reuse(sticky.run)["share"] - 0.3


def test_without_a_backend_identity_locality_is_unknown_not_claimed(policy_run):
    """Behind a router no response names its engine (the relays' header is not asked for):
    dagperf must not call the router's address the backend of every tree."""
    result = policy_run("round_robin")
    assert result.run.summary is not None
    locality = result.run.summary["backend_locality"]
    assert locality["method"] == "unknown"
    assert locality["trees_on_one_backend"] is None
    (line,) = [x for x in result.run.stdout.splitlines() if x.startswith("Backend locality")]
    assert "unknown" in line and "on one backend" not in line, line


@pytest.mark.parametrize("policy", ["consistent_hash", "round_robin", "cache_aware"])
def test_cached_tokens_equal_the_engines_own_counters(policy_run, policy: str):
    """What dagperf read from the replies is what the engines counted in /metrics: exactly,
    since both count the same tokens of the same requests (the issue's floor is 1%)."""
    result = policy_run(policy)
    assert result.run.summary is not None
    reported = result.run.summary["usage_prompt_cache_read_tokens"]["sum"]
    assert result.cached_on_engines > 0
    assert reported == result.cached_on_engines


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("endpoint", [*APIS, llama_native.NAME])
def test_every_endpoint_over_fork_history_answers_exact_lengths(
    engines: Engines, tmp_path: Path, endpoint: str, streaming: bool
):
    """Every endpoint type, with FORK history, straight to llama-server: no errors, with
    ignore_eos every reply exactly max_tokens long, which the output-length check confirms, and
    the cached prompt tokens dagperf read from the answers are the ones the engine counted.
    The tests' own fifth API (llama.cpp's /completion, registered in the run's processes) too:
    the registry's shape fits a real server's API that none of the others is."""
    rng = random.Random(f"{endpoint}-{streaming}")
    lines = []
    for t in range(2):
        kids = [f"t{t}-f{k}" for k in range(2)]
        root = turn(messages=[user(text(rng, 300))], max_tokens=5 + t, forks=kids)
        lines.append(conv(f"t{t}", root))
        lines += [
            conv(kid, *(turn(messages=[user(text(rng, 12))], max_tokens=3 + k) for k in range(2)))
            for kid in kids
        ]
    flags = ["--endpoint-type", endpoint, *(["--streaming"] if streaming else [])]
    env = llama_native.registered_in(tmp_path / "site") if endpoint not in APIS else None
    before = engines.counters(0)[CACHED]
    run = profile(engines.urls[0], tmp_path, lines, *flags, env=env)
    cached = engines.counters(0)[CACHED] - before
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.summary is not None and run.summary["error_request_count"]["avg"] == 0
    assert len(run.records) == 10
    for record in run.records:
        asked = record["metadata"]["max_tokens"]
        assert asked is not None
        assert record["metrics"]["output_sequence_length"]["value"] == asked, record
    check = output_length_check(run)
    assert check["status"] == "pass", check
    assert cached > 0  # the FORK children's history was cached
    assert run.summary["usage_prompt_cache_read_tokens"]["sum"] == cached
