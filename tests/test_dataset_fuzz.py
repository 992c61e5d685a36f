"""Whatever the bytes, the loader either accepts a file or refuses it cleanly, never crashes.

Accepted files must also compile into trees that keep the graph's invariants, encode onto the
wire as every request body is encoded, and run under `dagperf profile` to the end; the
`dagperf validate` command must end with 0 or 1, never a traceback. Hostile values are in the
mix: integers past 64 bits, NaN and infinities, lines nested thousands deep.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from unittest.mock import patch

import msgspec
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from dagperf.apis import APIS
from dagperf.apis.endpoint_config import EndpointConfig
from dagperf.cli import main
from dagperf.dataset import DatasetError
from dagperf.dataset.formats.dag_jsonl import DagConversation, read_dag_jsonl
from dagperf.dataset.formats.dag_jsonl.block_bytes import BlockBytes
from dagperf.dataset.formats.dag_jsonl.file_pass import FilePass
from dagperf.dataset.formats.dag_jsonl.lines import Interned, check_line, read_slowly
from dagperf.dataset.limits import MAX_DEPTH, line_problem, suspect_digits
from dagperf.graph import compile_dag_jsonl

from dagfile import check_tree

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ENDPOINT = EndpointConfig(url="127.0.0.1:1", model="m", streaming=True)
hostile_numbers = (
    st.integers(min_value=2**63 - 2, max_value=2**80)
    | st.integers(min_value=-(2**80), max_value=-(2**63) + 2)
    | st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e308, 2**31, 2**31 - 1])
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # json.dumps writes NaN and Infinity, as some writers do
    | hostile_numbers
    | st.text(max_size=8),
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
        last = b"\n".join(lines).count(b"\n") + 1  # an item may hold newlines of its own
        assert all(p.line is None or 1 <= p.line <= last for p in e.problems)
        return "refused"
    try:
        graph = compile_dag_jsonl(dataset, max_tree_requests=5_000)
    except DatasetError:
        return "refused"
    for tree in graph.trees:
        check_tree(tree)
        for node in tree.nodes:  # what the scheduler and the worker encode for the wire
            msgspec.json.encode(APIS["chat"].params(node.payload, ENDPOINT))
            msgspec.json.encode(node.payload.messages)
    assert graph.root_count == len(dataset.roots) >= 1
    return "valid"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


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
        if later and draw(st.integers(0, 4)) == 0:
            convs.append(draw(orchestrators(sid, later)))
            continue
        if candidates and draw(st.booleans()):
            child = draw(st.sampled_from(candidates))
            conversation["pre_session_spawns"] = [child]
            pre_spawned.add(child)
        forks = any(t.get("forks") for t in turns)
        modes = ["deltas_with_responses", "deltas_without_responses"]
        modes += [] if forks or sid in forked else ["message_array_with_responses"]
        if draw(st.integers(0, 3)) == 0:
            conversation["context_mode"] = draw(st.sampled_from(modes))
        convs.append(conversation)
    # Forward-only references can still make a later conversation a FORK target after it was
    # pre-session spawned; the generator keeps those disjoint above.
    return draw(st.permutations(convs))


@st.composite
def orchestrators(draw, sid: str, later: list[str]) -> dict:
    """A valid orchestrator line: spawns once, or in rounds (a count or a list, each round
    its own children), with fixed or drawn think times."""
    line: dict = {"session_id": sid, "orchestrator": True}
    form = draw(st.sampled_from(["once", "count", "list"]))
    if form == "list":
        children = draw(st.permutations(later))
        inner = st.integers(1, max(1, len(children) - 1))
        cuts = sorted(draw(st.sets(inner, max_size=2))) if len(children) > 1 else []
        groups = [children[a:b] for a, b in zip([0, *cuts], [*cuts, len(children)], strict=True)]
        rounds = []
        for group in groups:
            one: dict = {"spawns": group}
            if draw(st.booleans()):
                one["think_time_ms"] = draw(st.floats(0, 50))
            rounds.append(one)
        line["rounds"] = rounds
    else:
        line["spawns"] = draw(st.lists(st.sampled_from(later), unique=True, min_size=1))
        if form == "count":
            line["rounds"] = draw(st.integers(1, 3))
    if form != "once" and draw(st.booleans()):
        line["think_time_ms"] = draw(st.floats(0, 50))
        if draw(st.booleans()):
            line["think_time_sigma"] = draw(st.floats(0.01, 10))
            low, high = sorted(draw(st.lists(st.floats(0, 100), min_size=2, max_size=2)))
            line |= {"think_time_min_ms": low, "think_time_max_ms": high}
    return line


@FAST
@given(valid_files())
def test_valid_files_are_accepted(convs):
    assert outcome([json.dumps(c).encode() for c in convs]) == "valid"


@st.composite
def mutated_files(draw) -> list[bytes]:
    lines = [json.dumps(c) for c in draw(valid_files())]
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        how = draw(st.sampled_from(["value", "drop", "text", "duplicate", "extra", "deep"]))
        if how == "deep":  # an extra body field nested past any sane depth, up to 3,000
            depth = draw(st.integers(40, 3000))
            lines[i] = lines[i].replace(
                '"messages":', f'"extra": {{"x": {nested(depth)}}}, "messages":', 1
            )
            continue
        if how == "text":
            cut = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:cut] + draw(st.text(max_size=3)) + lines[i][cut:]
            continue
        if how == "duplicate":
            lines.insert(i, lines[i])
            continue
        try:
            obj = json.loads(lines[i])
        except (ValueError, RecursionError):  # broken, or made deep above
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
# A conversation's own field named as null: the file pass took the line as plain, and the
# run, reading it back as plain, found "the file changed".
@example(
    [
        b'{"session_id": "s0", "turns": [{"messages": [{"role": "user", "content": ""}]}], '
        b'"context_mode": null}'
    ]
)
def test_mutated_valid_files(lines):
    outcome(lines)


def models_accept(line: bytes) -> bool:
    try:
        DagConversation.model_validate_json(line)
    except ValidationError:
        return False
    return True


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_files())
def test_the_fast_reader_and_the_models_agree(lines):
    """The structs the loader reads with accept only lines the models accept, and a line they
    refuse is read again by the models: the loader's verdict on a line is the models'."""
    for line in lines:
        if line_problem(line) is None:
            fast = check_line(line) is not None
            event("accepted" if fast else "refused")
            assert not fast or models_accept(line), line
            read = check_line(line) or read_slowly(line)
            assert (not isinstance(read, list)) == models_accept(line), line


def verdict(lines: list[bytes]) -> object:
    """What the loader makes of lines: every conversation as a tree will send it, or every
    problem."""
    try:
        dataset = read_dag_jsonl(lines, "fuzz.jsonl")
    except DatasetError as e:
        return [str(p) for p in e.problems]
    intern = Interned()
    return {sid: dataset.lines.conversation(sid, intern) for sid in dataset.ids}


@FAST
@given(
    st.one_of(mutated_files(), valid_files().map(lambda cs: [json.dumps(c).encode() for c in cs]))
)
def test_a_block_taken_whole_reads_as_its_lines_one_by_one(lines):
    """The loader takes a block whole when nothing in it needs a look line by line: what it
    keeps, and every problem it finds, are what reading each line alone gives."""
    whole = verdict(lines)
    with patch.object(FilePass, "take_block", lambda self, chunk: False):
        assert verdict(lines) == whole


line_bytes = st.one_of(
    st.binary(max_size=60),
    st.text(alphabet='0123456789eE+-.[]{}\\u "x', max_size=120).map(str.encode),
    st.integers(0, 2 * MAX_DEPTH).map(lambda n: b"[{" * (n // 2) + b"[" * (n % 2)),
    st.lists(  # runs of digits about the length the rules draw their line at
        st.integers(1, 22).map(lambda n: b"7" * n) | st.sampled_from([b"e", b"E+", b"+", b" "]),
        max_size=6,
    ).map(b"".join),
)


@FAST
@given(st.lists(line_bytes, min_size=1, max_size=6))
def test_a_blocks_byte_checks_are_its_lines_rules(lines):
    """What numpy reads off a block's bytes is what the line-by-line rules say of its lines."""
    lines = [line.replace(b"\n", b" ") for line in lines]
    data = b"\n".join(lines)
    block = BlockBytes(data)
    assert block.suspect_digits() == suspect_digits(data)
    assert block.escapes_unicode() == (b"\\u" in data)
    assert block.nests_deep() == any(
        line.count(b"[") + line.count(b"{") > MAX_DEPTH for line in lines
    )


def test_the_fast_reader_and_the_models_agree_on_hostile_strings():
    turn_fields = [
        b'"max_tokens": 1.0',
        b'"max_tokens": true',
        b'"delay": true',
        b'"forks": [{"child": "b", "background": 1}]',
        b'"spawns": [{"children": ["b"], "join_at": 1.5}]',
        b'"spawns": [{"children": []}]',
        b'"extra": {"messages": 1}',
        b'"model": ""',
        b'"tools": [1]',
    ]
    lines = [
        b'{"session_id": "a", "turns": [{"messages": [{"role": "u"}], ' + f + b"}]}"
        for f in turn_fields
    ]
    lines += [
        b'{"session_id": "a", "turns": [{"messages": [{"role": "u", "content": "\\ud800"}]}]}',
        b'{"session_id": "\\u0061", "turns": [{"messages": [{"role": "\\u0073ystem"}]}]}',
        b'{"session_id": "a", "session_id": "b", "turns": [{"messages": [{"role": "u"}]}]}',
        b'{"session_id": "a", "turns": [{"messages": []}]}',
        b'{"session_id": "a", "turns": [{"messages": [{"role": ""}]}]}',
        b'{"session_id": "a", "turns": [{"messages": [{"content": "x"}]}]}',
        b'{"session_id": "a", "turns": [{"messages": [{"role": "u"}]}], "x": 1}',
    ]
    verdicts = [check_line(line) is not None for line in lines]
    assert verdicts == [models_accept(line) for line in lines]
    assert verdicts.count(True) == 2  # the escaped names and the repeated key, as JSON allows
    # A key written twice whose first value is wrong: the structs refuse it, the models take
    # the last value, and so does the loader, which reads it as the models do.
    twice = (
        b'{"session_id": "a", "turns": '
        b'[{"extra": [], "extra": {"t": 1}, "messages": [{"role": "u"}]}]}'
    )
    assert check_line(twice) is None and models_accept(twice)
    kept = read_dag_jsonl([twice], "f.jsonl").lines.conversation("a", Interned())
    assert kept.payloads[0].extra == {"t": 1}


@settings(max_examples=60, deadline=None)
@given(st.one_of(mutated_files(), st.lists(st.binary(max_size=60), max_size=4)))
def test_validate_command_never_crashes(lines):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.jsonl"
        path.write_bytes(b"\n".join(lines))
        assert main(["validate", str(path)]) in (0, 1)


@st.composite
def hostile_valid_files(draw) -> list[bytes]:
    """Valid files whose turns carry numbers where a turn may, hostile ones in half the files."""
    convs = draw(valid_files())
    hostile = hostile_numbers if draw(st.booleans()) else st.nothing()
    for conversation in convs:
        for turn in conversation.get("turns", ()):  # (an orchestrator has none)
            if draw(st.booleans()):
                turn["max_tokens"] = draw(st.integers(1, 2**31 - 1) | hostile)
            if draw(st.booleans()):
                turn["extra"] = {"seed": draw(st.integers(-(2**63), 2**63 - 1) | hostile)}
            if draw(st.booleans()):
                turn["delay"] = draw(st.floats(0, 5) | hostile)
    return [json.dumps(c).encode() for c in convs]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_valid_files())
def test_whatever_validate_accepts_profile_runs_to_the_end(lines):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.jsonl"
        path.write_bytes(b"\n".join(lines))
        checked = main(["validate", str(path)])
        assert checked in (0, 1)
        out = Path(tmp) / "out"
        ran = main(["profile", "--input-file", str(path), "--artifact-dir", str(out), "--quiet",
                    "--sim-ttft-ms", "0", "--sim-itl-ms", "0"])  # fmt: skip
        assert ran == (0 if checked == 0 else 2)
        event("ran" if ran == 0 else "refused")
        if ran == 0:
            summary = json.loads((out / "profile_export_aiperf.json").read_text())
            assert summary["is_complete"] and summary["error_request_count"]["avg"] == 0


def test_an_escaped_system_role_is_still_a_system_message():
    line = (
        b'{"session_id": "a", "turns": [{"messages": [{"role": "user"}]}, '
        b'{"messages": [{"role": "\\u0073ystem", "content": "x"}]}]}'
    )
    with pytest.raises(DatasetError) as caught:
        read_dag_jsonl([line], "f.jsonl")
    (problem,) = caught.value.problems
    assert "turn 1: non-root turns may not contain a 'system' message" in problem.message
