"""Every refusal of the dag_jsonl loader: the line it names and the problem it states.

Each bad line follows a valid one (`OK`) so the line number is checked, not just line 1.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import threading
from typing import Any

import pytest

from dagperf.dataset import MAX_PROBLEMS, DatasetError
from dagperf.dataset.formats.dag_jsonl import load_dag_jsonl, read_dag_jsonl
from dagperf.dataset.formats.dag_jsonl.lines import Interned
from dagperf.dataset.loader import load_file

from dagfile import conv, encode, line_numbers, load, problems, refusal, turn, user

SYSTEM = {"role": "system", "content": "be brief"}
OK = conv("ok")


def test_invalid_json():
    line, message = refusal(OK, "{not json")
    assert (line, message.split(":")[0]) == (2, "invalid JSON")


def test_missing_session_id():
    assert refusal(OK, {"turns": [turn()]}) == (2, "session_id: Field required")


def test_duplicate_session_id_names_both_lines():
    assert refusal(OK, conv("a"), conv("a")) == (
        3,
        "duplicate session_id 'a' (first declared on line 2)",
    )


def test_empty_turns():
    expected = (2, "session 'a' turns: at least one turn is needed (only an orchestrator has none)")
    assert refusal(OK, {"session_id": "a", "turns": []}) == expected
    assert refusal(OK, {"session_id": "a"}) == expected


def test_turn_without_messages():
    assert refusal(OK, {"session_id": "a", "turns": [{"max_tokens": 5}]}) == (
        2,
        "turns.0.messages: Field required (session 'a')",
    )


def test_messages_not_a_list():
    assert refusal(OK, {"session_id": "a", "turns": [{"messages": {"role": "user"}}]}) == (
        2,
        "turns.0.messages: Input should be a valid array (session 'a')",
    )


def test_empty_messages():
    line, message = refusal(OK, {"session_id": "a", "turns": [{"messages": []}]})
    assert (line, message.split(",")[0]) == (
        2,
        "turns.0.messages: List should have at least 1 item after validation",
    )


def test_unknown_turn_key():
    assert refusal(OK, conv("a", turn(max_token=5))) == (
        2,
        "turns.0.max_token: Extra inputs are not permitted (session 'a')",
    )


def test_unknown_conversation_key():
    assert refusal(OK, conv("a", not_a_real_field=1)) == (
        2,
        "not_a_real_field: Extra inputs are not permitted (session 'a')",
    )


def test_message_without_role():
    assert refusal(OK, conv("a", turn(messages=[user(), {"content": "x"}]))) == (
        2,
        "turns.0.messages: each message must have a 'role' string, but message at index 1 "
        "does not (session 'a')",
    )


def test_system_message_on_a_later_turn():
    line, message = refusal(OK, conv("a", turn(), turn(messages=[user(), SYSTEM])))
    assert line == 2
    assert message.startswith(
        "session 'a' turn 1: non-root turns may not contain a 'system' message (message at "
        "index 1); chat templates ignore"
    )


def test_system_message_on_a_fork_childs_first_turn():
    line, message = refusal(
        conv("root", turn(forks=["kid"])), OK, conv("kid", turn(messages=[SYSTEM, user()]))
    )
    assert line == 3
    assert message.startswith(
        "session 'kid' turn 0: non-root turns may not contain a 'system' message (this FORK "
        "child continues the history of 'root') (message at index 0)"
    )


def test_system_message_allowed_where_a_history_starts():
    dataset = load(
        conv("root", turn(messages=[SYSTEM, user()], spawns=["agent"])),
        conv("agent", turn(messages=[SYSTEM, user()])),
        conv("pre", turn(messages=[SYSTEM, user()])),
        conv("other", turn(), pre_session_spawns=["pre"]),
    )
    assert dataset.roots == ["root", "other"]


@pytest.mark.parametrize(
    "entry",
    [{"forks": ["brnch-a"]}, {"spawns": ["brnch-a"]}, {"spawns": [{"children": ["brnch-a"]}]}],
)
def test_unresolved_branch_target(entry):
    assert refusal(OK, conv("root", turn(**entry)), conv("branch-a")) == (
        2,
        "session 'root' turn 0: branch target 'brnch-a' not declared. Known sessions: "
        "['branch-a', 'ok', 'root'] (did you mean 'branch-a'?)",
    )


def test_unresolved_target_lists_at_most_ten_known_sessions():
    lines = [conv(f"s{i:02}") for i in range(12)]
    line, message = refusal(*lines, conv("root", turn(forks=["zzz"])))
    assert line == 13
    assert message.endswith(
        "Known sessions: ['root', 's00', 's01', 's02', 's03', 's04', "
        "'s05', 's06', 's07', 's08', ... 3 more]"
    )


def test_unresolved_pre_session_target():
    assert refusal(OK, conv("root", pre_session_spawns=["ghost"])) == (
        2,
        "session 'root' pre_session_spawns: branch target 'ghost' not declared. Known sessions: "
        "['ok', 'root']",
    )


def test_cycle_reports_its_path_on_the_line_that_closes_it():
    assert refusal(
        conv("A", turn(spawns=["B"]), turn()),
        conv("B", turn(forks=["C"])),
        OK,
        conv("C", turn(spawns=["A"])),
    ) == (4, "cycle detected: A -> B -> C -> A")


def test_self_reference_is_a_cycle():
    assert refusal(OK, conv("A", turn(forks=["A"]))) == (2, "cycle detected: A -> A")


def test_two_fork_parents():
    assert refusal(conv("A", turn(forks=["Y"])), conv("B", turn(forks=["Y"])), conv("Y")) == (
        2,
        "session 'Y' forked by both 'A' turn 0 and 'B' turn 0; FORK-mode children require a "
        "single parent, whose history they continue",
    )


def test_spawn_target_may_have_many_parents():
    dataset = load(conv("A", turn(spawns=["Y"])), conv("B", turn(spawns=["Y"])), conv("Y"))
    assert dataset.roots == ["A", "B"]


def test_bare_fork_on_a_non_final_turn():
    line, message = refusal(OK, conv("X", turn(forks=["c"]), turn()), conv("c"))
    assert line == 2
    assert message.startswith(
        "session 'X' turn 0 has foreground FORK branches but is not the last turn and no join "
        "is declared"
    )


def test_bare_and_background_fork_mixed_on_a_non_final_turn():
    line, message = refusal(
        OK,
        conv("X", turn(forks=["c", {"child": "d", "background": True}]), turn()),
        conv("c"),
        conv("d"),
    )
    assert line == 2
    assert message.startswith(
        "session 'X' turn 0 mixes bare and background FORK entries but is not the last turn"
    )


def test_forks_allowed_where_the_format_allows_them():
    load(
        conv(
            "X",
            turn(forks=[{"child": "b", "background": True}]),
            turn(forks=["c", {"child": "d", "background": True}]),
        ),
        conv("b"),
        conv("c"),
        conv("d"),
    )


def test_pre_session_target_that_is_also_a_fork_target():
    assert refusal(OK, conv("X", turn(forks=["Y"]), pre_session_spawns=["Y"]), conv("Y")) == (
        2,
        "session 'Y' is referenced by 'X' pre_session_spawns but is also a FORK target; "
        "pre-session children must be SPAWN-mode (they have no parent history to inherit)",
    )


def test_empty_file():
    line, message = refusal()
    assert line is None
    assert message == "empty file: a dag_jsonl file needs at least one conversation line"
    assert str(problems()[0]) == f"test.jsonl: {message}"


def test_blank_lines_only_is_empty():
    assert refusal("", "   ")[1].startswith("empty file")


@pytest.mark.parametrize("join_at", [0, 1])
def test_join_at_not_after_the_spawning_turn(join_at):
    spawning = turn(spawns=[{"children": ["c"], "join_at": join_at}])
    assert refusal(OK, conv("X", turn(), spawning, turn()), conv("c")) == (
        2,
        f"session 'X' turn 1: spawn join_at={join_at} must be greater than the spawning turn "
        "index 1",
    )


def test_join_at_beyond_the_last_turn():
    spawning = turn(spawns=[{"children": ["c"], "join_at": 2}])
    assert refusal(OK, conv("X", spawning, turn()), conv("c")) == (
        2,
        "session 'X' turn 0: spawn join_at=2 is out of range: the conversation has 2 turn(s), "
        "so join_at must be at most 1",
    )


def test_join_at_on_the_last_turn_has_nowhere_to_join():
    spawning = turn(spawns=[{"children": ["c"], "join_at": 1}])
    line, message = refusal(OK, conv("X", spawning), conv("c"))
    assert line == 2
    assert message.startswith("session 'X' turn 0: spawn join_at=1 is out of range")


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
    assert refusal(OK, conv("X", *turns), conv("c")) == (
        2,
        f"session 'X' turn 1: child 'c' is listed twice in {listed_in}",
    )


def test_child_listed_twice_in_pre_session_spawns():
    assert refusal(OK, conv("X", pre_session_spawns=["c", "c"]), conv("c")) == (
        2,
        "session 'X' pre_session_spawns: child 'c' is listed twice",
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [(True, "True"), (False, "False"), (0, "0"), (-3, "-3"), (2.5, "2.5"), ("8", "'8'")],
)
def test_max_tokens_must_be_a_positive_integer(value, shown):
    assert refusal(OK, conv("X", turn(max_tokens=value))) == (
        2,
        f"turns.0.max_tokens: must be a positive integer, got {shown} (session 'X')",
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", "turns.0.delay: Input should be greater than or equal to 0"),
        ("true", "turns.0.delay: Input should be a valid number"),
        ('"5"', "turns.0.delay: Input should be a valid number"),
        ("NaN", "turns.0.delay: nan is not a finite number"),
    ],
)
def test_delay_must_be_a_non_negative_number(value, message):
    line = '{"session_id":"X","turns":[{"messages":[{"role":"user"}],"delay":' + value + "}]}"
    assert refusal(OK, line) == (2, f"{message} (session 'X')")


def test_extra_may_not_replace_the_history():
    assert refusal(OK, conv("X", turn(extra={"messages": []}))) == (
        2,
        "turns.0.extra: may not set 'messages': it would replace the conversation history "
        "(session 'X')",
    )


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
    found = problems(OK, conv("X", turn(**fields)), conv("c"))
    assert found[0].line == 2
    assert found[0].message.startswith(message)


def test_line_that_is_not_an_object():
    assert refusal(OK, "[1, 2]") == (
        2,
        "expected a JSON object (one conversation per line), got an array",
    )


def test_line_that_is_not_utf8():
    with pytest.raises(DatasetError) as caught:
        read_dag_jsonl([json.dumps(OK).encode(), b'\xff{"session_id": 1}'], "raw.jsonl")
    assert [(p.line, p.message) for p in caught.value.problems] == [
        (2, "invalid JSON: not UTF-8 text (byte 0xff at offset 0)")
    ]


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


def test_whole_file_problems_stop_at_the_same_limit():
    found = problems(*[conv(f"s{i}", turn(forks=[f"ghost{i}"])) for i in range(MAX_PROBLEMS + 5)])
    assert len(found) == MAX_PROBLEMS + 1
    assert [p.line for p in found[:-1]] == list(range(1, MAX_PROBLEMS + 1))
    assert (found[-1].line, found[-1].message.split(";")[0]) == (
        None,
        f"too many problems: stopped checking after {MAX_PROBLEMS}",
    )


def test_file_forms(tmp_path):
    lines = encode(conv("root", turn(forks=["a"])), "", conv("a"))
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(b"\xef\xbb\xbf" + b"".join(lines))  # with a byte-order mark
    packed = tmp_path / "packed.jsonl.gz"
    packed.write_bytes(gzip.compress(b"".join(lines)))
    for path in (plain, packed):
        dataset = load_dag_jsonl(path)
        assert line_numbers(dataset) == {"root": 1, "a": 3}
        assert dataset.source == str(path)


def test_unreadable_files(tmp_path):
    broken = tmp_path / "broken.gz"
    broken.write_bytes(gzip.compress(b"x" * 1000)[:20])
    for path, reason in [
        (tmp_path / "missing", "cannot read: No such file or directory"),
        (tmp_path, "cannot read: Is a directory"),
        (broken, "cannot read:"),
    ]:
        with pytest.raises(DatasetError) as caught:
            load_dag_jsonl(path)
        (problem,) = caught.value.problems
        assert (problem.source, problem.line) == (str(path), None)
        assert problem.message.startswith(reason)


def test_turn_fields_are_kept_as_authored():
    tool = {"type": "function", "function": {"name": "f"}}
    authored = turn(model="m", max_tokens=7, tools=[tool], extra={"temperature": 0.5}, delay=12.5)
    kept = load(conv("a", authored)).lines.conversation("a", Interned())
    t = kept.payloads[0]
    assert (t.messages, t.model, t.max_tokens, t.tools, t.extra, kept.delays) == (
        authored["messages"],
        "m",
        7,
        [tool],
        {"temperature": 0.5},
        (0.0125,),
    )


def test_a_long_read_says_how_far_it_is(tmp_path, monkeypatch):
    """A read that outlasts the progress interval logs where it is, by the file's size."""
    from dagperf.dataset import progress

    path = tmp_path / "big.jsonl"
    path.write_bytes(b"x" * 4_000_000)
    said: list[str] = []
    heard = threading.Event()

    class Heard(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())
            heard.set()

    def slow_read(lines, source):  # holds the file open until the progress line has come
        assert heard.wait(10), "no progress line"
        return "read"

    monkeypatch.setattr(progress, "EVERY_S", 0.01)
    handler = Heard()
    logger = logging.getLogger("dagperf.dataset")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        assert load_file(path, slow_read) == "read"
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    assert said[0].startswith(f"reading {path}: 0% of 4 MB after ")


@pytest.mark.parametrize("block", [1, 7, 64, 1 << 20])
def test_a_file_read_in_blocks_numbers_its_lines_as_one_read_line_by_line(monkeypatch, block):
    """Files are read a block at a time and split in C: lines cut by a block's end, blank lines,
    CRLF, a byte-order mark and a last line without its newline are numbered as they are when
    the lines come one by one."""
    from dagperf.dataset.formats.dag_jsonl import file_pass as dag_pass
    from dagperf.dataset.formats.dag_jsonl import reader as dag_reader

    monkeypatch.setattr(dag_pass, "BATCH_BYTES", block)
    a, b = (line.rstrip(b"\n") for line in encode(conv("a", turn(forks=["b"])), conv("b")))
    text = b"\xef\xbb\xbf" + a + b"\r\n\n  \n" + b + b"\n" + b'{"session_id": 5}'

    def problems_read(lines_or_stream: Any) -> list[str]:
        with pytest.raises(DatasetError) as caught:
            dag_reader.read_dag_jsonl(lines_or_stream, "<stdin>")
        return [str(p) for p in caught.value.problems]

    by_line = problems_read(text.splitlines(keepends=True))
    assert by_line and all(p.startswith("<stdin>:5: ") for p in by_line)  # after two blank lines
    assert problems_read(io.BytesIO(text)) == by_line
    fixed = dag_reader.read_dag_jsonl(io.BytesIO(text.rsplit(b"\n", 1)[0]), "<stdin>")
    assert line_numbers(fixed) == {"a": 1, "b": 4}
