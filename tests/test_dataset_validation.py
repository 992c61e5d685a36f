"""Every refusal of the dag_jsonl loader: the line it names and the problem it states."""

from __future__ import annotations

import gzip
import json

import pytest

from dagfile import conv, encode, load, only_problem, problems, turn, user
from dagperf.dataset import MAX_PROBLEMS, DatasetError, load_dag_jsonl, read_dag_jsonl

SYSTEM = {"role": "system", "content": "be brief"}


def test_invalid_json_names_the_line():
    p = only_problem(conv("a"), "{not json")
    assert (p.line, p.message.split(":")[0]) == (2, "invalid JSON")


def test_missing_session_id():
    p = only_problem({"turns": [turn()]})
    assert (p.line, p.message) == (1, "session_id: Field required")


def test_duplicate_session_id_names_both_lines():
    p = only_problem(conv("a"), conv("b"), conv("a"))
    assert p.line == 3
    assert p.message == "duplicate session_id 'a' (first declared on line 1)"


def test_empty_turns():
    p = only_problem(conv("a", turns=[]) | {"turns": []})
    assert p.line == 1
    assert p.message.startswith("turns: List should have at least 1 item")
    assert "session 'a'" in p.message


def test_turn_without_messages():
    p = only_problem({"session_id": "a", "turns": [{"max_tokens": 5}]})
    assert (p.line, p.message) == (1, "turns.0.messages: Field required (session 'a')")


def test_messages_not_a_list():
    p = only_problem({"session_id": "a", "turns": [{"messages": {"role": "user"}}]})
    assert p.message.startswith("turns.0.messages: Input should be a valid")
    assert "(session 'a')" in p.message


def test_empty_messages():
    p = only_problem({"session_id": "a", "turns": [{"messages": []}]})
    assert p.message.startswith("turns.0.messages: List should have at least 1 item")


def test_unknown_turn_key():
    p = only_problem(conv("a", turn(max_token=5)))
    assert p.message == "turns.0.max_token: Extra inputs are not permitted (session 'a')"


def test_unknown_conversation_key():
    p = only_problem(conv("a", not_a_real_field=1))
    assert p.message == "not_a_real_field: Extra inputs are not permitted (session 'a')"


def test_message_without_role():
    p = only_problem(conv("a", turn(messages=[user(), {"content": "x"}])))
    assert p.message.startswith("turns.0.messages: each message must have a 'role'")
    assert "message at index 1 does not" in p.message


def test_system_message_on_a_later_turn():
    p = only_problem(conv("a", turn(), turn(messages=[SYSTEM, user()])))
    assert p.line == 1
    assert p.message.startswith(
        "session 'a' turn 1: non-root turns may not contain a 'system' message"
    )


def test_system_message_on_a_fork_childs_first_turn():
    p = only_problem(
        conv("root", turn(forks=["kid"])), conv("kid", turn(messages=[SYSTEM, user()]))
    )
    assert p.line == 2
    assert p.message.startswith("session 'kid' turn 0: non-root turns may not contain")
    assert "'root'" in p.message


def test_system_message_allowed_where_a_history_starts():
    dataset = load(
        conv("root", turn(messages=[SYSTEM, user()], spawns=["agent"])),
        conv("agent", turn(messages=[SYSTEM, user()])),
        conv("pre", turn(messages=[SYSTEM, user()])),
        conv("other", turn(), pre_session_spawns=["pre"]),
    )
    assert dataset.roots == ["root", "other"]


@pytest.mark.parametrize(
    ("entry", "where"),
    [
        ({"forks": ["brnch-a"]}, "session 'root' turn 0"),
        ({"spawns": ["brnch-a"]}, "session 'root' turn 0"),
        ({"spawns": [{"children": ["brnch-a"]}]}, "session 'root' turn 0"),
    ],
)
def test_unresolved_branch_target(entry, where):
    p = only_problem(conv("root", turn(**entry)), conv("branch-a"))
    assert p.line == 1
    assert p.message.startswith(f"{where}: branch target 'brnch-a' not declared.")
    assert "Known sessions: ['branch-a', 'root']" in p.message
    assert "did you mean 'branch-a'?" in p.message


def test_unresolved_pre_session_target():
    p = only_problem(conv("root", pre_session_spawns=["ghost"]))
    assert p.message.startswith("session 'root' pre_session_spawns: branch target 'ghost'")


def test_cycle_reports_its_path():
    p = only_problem(
        conv("A", turn(spawns=["B"]), turn()),
        conv("B", turn(forks=["C"])),
        conv("C", turn(spawns=["A"])),
    )
    assert p.message == "cycle detected: A -> B -> C -> A"
    assert p.line == 3  # the session whose reference closes the cycle


def test_self_reference_is_a_cycle():
    p = only_problem(conv("A", turn(forks=["A"])))
    assert p.message == "cycle detected: A -> A"


def test_two_fork_parents():
    p = only_problem(conv("A", turn(forks=["Y"])), conv("B", turn(forks=["Y"])), conv("Y"))
    assert p.line == 2
    assert p.message.startswith("session 'Y' forked by both 'A' turn 0 and 'B' turn 0")


def test_spawn_target_may_have_many_parents():
    dataset = load(conv("A", turn(spawns=["Y"])), conv("B", turn(spawns=["Y"])), conv("Y"))
    assert dataset.roots == ["A", "B"]


def test_bare_fork_on_a_non_final_turn():
    p = only_problem(conv("X", turn(forks=["c"]), turn()), conv("c"))
    assert p.message.startswith(
        "session 'X' turn 0 has foreground FORK branches but is not the last turn"
    )


def test_bare_and_background_fork_mixed_on_a_non_final_turn():
    p = only_problem(
        conv("X", turn(forks=["c", {"child": "d", "background": True}]), turn()),
        conv("c"),
        conv("d"),
    )
    assert p.message.startswith("session 'X' turn 0 mixes bare and background FORK entries")


def test_bare_and_background_fork_mixed_on_the_last_turn_is_fine():
    load(
        conv("X", turn(), turn(forks=["c", {"child": "d", "background": True}])),
        conv("c"),
        conv("d"),
    )


def test_pre_session_target_that_is_also_a_fork_target():
    p = only_problem(
        conv("X", turn(forks=["Y"]), pre_session_spawns=["Y"]),
        conv("Y"),
    )
    assert p.message.startswith("session 'Y' is referenced by 'X' pre_session_spawns but is also")


def test_empty_file():
    p = only_problem()
    assert p.line is None
    assert str(p) == "test.jsonl: empty file: a dag_jsonl file needs at least one conversation line"


def test_blank_lines_only_is_empty():
    assert only_problem("", "   ").message.startswith("empty file")


@pytest.mark.parametrize("join_at", [0, 1])
def test_join_at_not_after_the_spawning_turn(join_at):
    p = only_problem(
        conv("X", turn(), turn(spawns=[{"children": ["c"], "join_at": join_at}]), turn()),
        conv("c"),
    )
    assert p.message == (
        f"session 'X' turn 1: spawn join_at={join_at} must be greater than the spawning turn "
        "index 1"
    )


def test_join_at_beyond_the_last_turn():
    p = only_problem(conv("X", turn(spawns=[{"children": ["c"], "join_at": 2}]), turn()), conv("c"))
    assert p.message.startswith("session 'X' turn 0: spawn join_at=2 is out of range")
    assert "2 turn(s)" in p.message


@pytest.mark.parametrize(
    ("turns", "listed_in"),
    [
        ([turn(), turn(forks=["c", "c"])], "forks"),
        ([turn(), turn(forks=["c", {"child": "c", "background": True}])], "forks"),
        ([turn(), turn(spawns=["c", "c"]), turn()], "spawns"),
        ([turn(), turn(spawns=["c", {"children": ["c"], "join_at": 2}]), turn()], "spawns"),
    ],
)
def test_child_listed_twice_on_one_turn(turns, listed_in):
    p = only_problem(conv("X", *turns), conv("c"))
    assert p.message == f"session 'X' turn 1: child 'c' is listed twice in {listed_in}"


def test_child_listed_twice_in_pre_session_spawns():
    p = only_problem(conv("X", pre_session_spawns=["c", "c"]), conv("c"))
    assert p.message == "session 'X' pre_session_spawns: child 'c' is listed twice"


@pytest.mark.parametrize("value", [True, False, 0, -3, 2.5, "8"])
def test_max_tokens_must_be_a_positive_integer(value):
    p = only_problem(conv("X", turn(max_tokens=value)))
    assert p.message.startswith("turns.0.max_tokens: must be a positive integer, got")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", "turns.0.delay: Input should be greater than or equal to 0"),
        ("true", "turns.0.delay: Input should be a valid number"),
        ('"5"', "turns.0.delay: Input should be a valid number"),
        ("NaN", "turns.0.delay: Input should be a finite number"),
    ],
)
def test_delay_must_be_a_non_negative_number(value, message):
    line = '{"session_id":"X","turns":[{"messages":[{"role":"user"}],"delay":' + value + "}]}"
    assert only_problem(line).message == f"{message} (session 'X')"


def test_extra_may_not_replace_the_history():
    p = only_problem(conv("X", turn(extra={"messages": []})))
    assert p.message.startswith("turns.0.extra: may not set 'messages'")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"forks": [5]}, "turns.0.forks.0: a forks entry must be a session id string"),
        ({"forks": [{"child": ""}]}, "turns.0.forks.0.child: String should have at least 1"),
        ({"forks": [{"chld": "c"}]}, "turns.0.forks.0.child: Field required"),
        ({"spawns": [None]}, "turns.0.spawns.0: a spawns entry must be a session id string"),
        ({"spawns": [{"children": []}]}, "turns.0.spawns.0.children: List should have at least"),
        ({"spawns": [{"children": ["c"], "join_at": True}]}, "turns.0.spawns.0.join_at: Input"),
    ],
)
def test_malformed_branch_entries(fields, message):
    assert message in problems(conv("X", turn(**fields)), conv("c"))[0].message


def test_line_that_is_not_an_object():
    p = only_problem(conv("a"), "[1, 2]")
    assert (p.line, p.message) == (
        2,
        "expected a JSON object (one conversation per line), got an array",
    )


def test_line_that_is_not_utf8():
    found = read_problems([json.dumps(conv("a")).encode(), b'\xff{"session_id": 1}'])
    assert [(p.line, p.message) for p in found] == [
        (2, "invalid JSON: not UTF-8 text (byte 0xff at offset 0)")
    ]


def read_problems(lines: list[bytes]):
    with pytest.raises(DatasetError) as caught:
        read_dag_jsonl(lines, "raw.jsonl")
    return caught.value.problems


def test_every_problem_in_one_pass_in_line_order():
    found = problems(
        conv("root", turn(forks=["ghost"])),
        "",
        "oops",
        conv("root"),
        conv("x", turn(max_tokens=0)),
        conv("y", turn(), turn(messages=[SYSTEM])),
    )
    assert [p.line for p in found] == [1, 3, 4, 5, 6]
    assert "branch target 'ghost'" in found[0].message
    assert "turns.0.max_tokens" in found[3].message


def test_a_failed_line_is_not_reported_again_as_an_undeclared_target():
    found = problems(conv("root", turn(forks=["kid"])), conv("kid", turn(max_token=3)))
    assert [p.line for p in found] == [2]


def test_problems_stop_at_a_sane_limit():
    found = problems(*["{bad"] * (MAX_PROBLEMS * 3))
    assert len(found) == MAX_PROBLEMS + 1
    assert found[-1].line == MAX_PROBLEMS
    assert found[-1].message.startswith("too many problems: stopped reading here")


def test_file_forms(tmp_path):
    lines = encode(conv("root", turn(forks=["a"])), "", conv("a"))
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(b"\xef\xbb\xbf" + b"".join(lines))  # with a byte-order mark
    packed = tmp_path / "packed.jsonl.gz"
    packed.write_bytes(gzip.compress(b"".join(lines)))
    for path in (plain, packed):
        dataset = load_dag_jsonl(path)
        assert dataset.lines == {"root": 1, "a": 3}
        assert dataset.source == str(path)


def test_unreadable_files(tmp_path):
    for path, reason in [(tmp_path / "missing", "No such file"), (tmp_path, "Is a directory")]:
        with pytest.raises(DatasetError) as caught:
            load_dag_jsonl(path)
        assert reason in str(caught.value)
    broken = tmp_path / "broken.gz"
    broken.write_bytes(gzip.compress(b"x" * 1000)[:20])
    with pytest.raises(DatasetError, match="cannot read"):
        load_dag_jsonl(broken)


def test_turn_fields_are_kept_as_authored():
    tool = {"type": "function", "function": {"name": "f"}}
    dataset = load(
        conv(
            "a", turn(model="m", max_tokens=7, tools=[tool], extra={"temperature": 0.5}, delay=12.5)
        )
    )
    t = dataset.conversations["a"].turns[0]
    assert (t.model, t.max_tokens, t.tools, t.extra, t.delay) == (
        "m",
        7,
        [tool],
        {"temperature": 0.5},
        12.5,
    )
