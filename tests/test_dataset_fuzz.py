"""Whatever the bytes, the loader either accepts a file or refuses it cleanly, never crashes.

Accepted files must also compile into trees that keep the graph's invariants, and the
`dagperf validate` command must end with 0 or 1, never a traceback.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagperf.cli import main
from dagperf.dataset import DatasetError, read_dag_jsonl
from dagperf.graph import compile_dag_jsonl

from dagfile import check_tree

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def outcome(lines: list[bytes]) -> str:
    """Load and compile; return 'valid' or 'refused', and let anything else fail the test."""
    try:
        dataset = read_dag_jsonl(lines, "fuzz.jsonl")
    except DatasetError as e:
        assert e.problems
        assert all(p.line is None or 1 <= p.line <= max(len(lines), 1) for p in e.problems)
        return "refused"
    try:
        graph = compile_dag_jsonl(dataset, max_tree_requests=5_000)
    except DatasetError:
        return "refused"
    for tree in graph.trees:
        check_tree(tree)
    assert graph.root_count == len(dataset.roots) >= 1
    return "valid"


@FAST
@given(st.lists(st.binary(max_size=120), max_size=6))
def test_random_bytes(lines):
    outcome([line + b"\n" for line in lines])


@FAST
@given(st.lists(json_values, max_size=6))
def test_random_json_lines(values):
    outcome([json.dumps(v).encode() for v in values])


@st.composite
def valid_files(draw) -> list[dict]:
    """Well-formed datasets: references point forward only, one FORK parent per child."""
    count = draw(st.integers(1, 7))
    ids = [f"s{i}" for i in range(count)]
    turns_of = [draw(st.integers(1, 4)) for _ in ids]
    forked: set[str] = set()
    pre_spawned: set[str] = set()
    convs = []
    for i, sid in enumerate(ids):
        n = turns_of[i]
        turns = [
            {"messages": [{"role": "user", "content": draw(st.text(max_size=6))}]} for _ in range(n)
        ]
        later = ids[i + 1 :]
        for k in range(n):
            picked = (
                draw(st.lists(st.sampled_from(later), unique=True, max_size=3)) if later else []
            )
            for child in picked:
                mode = draw(st.sampled_from(["fork", "bg_fork", "spawn", "spawn_join"]))
                if mode.endswith("fork") and (child in forked or child in pre_spawned):
                    mode = "spawn"
                if mode == "fork" and k < n - 1:
                    mode = "bg_fork"
                if mode == "spawn_join" and k + 1 >= n:
                    mode = "spawn"
                entry = turns[k]
                if mode == "fork":
                    entry.setdefault("forks", []).append(child)
                elif mode == "bg_fork":
                    entry.setdefault("forks", []).append({"child": child, "background": True})
                elif mode == "spawn":
                    entry.setdefault("spawns", []).append(child)
                else:
                    join_at = draw(st.integers(k + 1, n - 1))
                    entry.setdefault("spawns", []).append({"children": [child], "join_at": join_at})
                if mode.endswith("fork"):
                    forked.add(child)
        conversation = {"session_id": sid, "turns": turns}
        candidates = [c for c in later if c not in forked]
        if candidates and draw(st.booleans()):
            child = draw(st.sampled_from(candidates))
            conversation["pre_session_spawns"] = [child]
            pre_spawned.add(child)
        convs.append(conversation)
    # Forward-only references can still make a later conversation a FORK target after it was
    # pre-session spawned; the generator keeps those disjoint above.
    return draw(st.permutations(convs))


@FAST
@given(valid_files())
def test_valid_files_are_accepted(convs):
    assert outcome([json.dumps(c).encode() for c in convs]) == "valid"


@st.composite
def mutated_files(draw) -> list[bytes]:
    lines = [json.dumps(c) for c in draw(valid_files())]
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        how = draw(st.sampled_from(["value", "drop", "text", "duplicate", "extra"]))
        if how == "text":
            cut = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:cut] + draw(st.text(max_size=3)) + lines[i][cut:]
            continue
        if how == "duplicate":
            lines.insert(i, lines[i])
            continue
        try:
            obj = json.loads(lines[i])
        except ValueError:
            continue
        container, key = _random_slot(draw, obj)
        if how == "drop" and isinstance(container, dict) and key in container:
            del container[key]
        elif how == "extra" and isinstance(container, dict):
            container[draw(st.text(max_size=6))] = draw(json_values)
        elif key is not None:
            container[key] = draw(json_values)
        lines[i] = json.dumps(obj)
    return [line.encode("utf-8", "surrogatepass") for line in lines]


def _random_slot(draw, obj):
    """Walk into a random nested container; return it and one of its keys or indices."""
    container, key = obj, None
    while True:
        keys = list(container) if isinstance(container, dict) else list(range(len(container)))
        if not keys:
            return container, None
        key = draw(st.sampled_from(keys))
        child = container[key]
        if not isinstance(child, (dict, list)) or draw(st.booleans()):
            return container, key
        container = child


@FAST
@given(mutated_files())
def test_mutated_valid_files(lines):
    outcome(lines)


@settings(max_examples=60, deadline=None)
@given(st.one_of(mutated_files(), st.lists(st.binary(max_size=60), max_size=4)))
def test_validate_command_never_crashes(lines):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.jsonl"
        path.write_bytes(b"\n".join(lines))
        assert main(["validate", str(path)]) in (0, 1)
