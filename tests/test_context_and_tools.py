"""What belongs to a conversation rather than a turn, as AIPerf 0.13 has it: a dag_jsonl
conversation's own `context_mode`, and tools that later turns and FORK children keep sending."""

from __future__ import annotations

import pytest

from dagperf.graph import compile_dag_jsonl
from dagperf.graph.model import Payload
from dagperf.graph.sessions import ContextMode, GraphNode, SessionSpec, compile_sessions

from dagfile import conv, load, problems, turn, user

TOOLS = [{"type": "function", "function": {"name": "grep", "parameters": {}}}]
OTHER = [{"type": "function", "function": {"name": "edit", "parameters": {}}}]


def tree_of(*lines):
    (tree, *_) = compile_dag_jsonl(load(*lines)).trees
    return tree


def by_name(tree) -> dict[str, object]:
    return {f"{tree.sessions[n.session].conversation_id}:{n.turn}": n for n in tree.nodes}


def test_each_conversation_says_how_its_turns_build_their_history():
    tree = tree_of(
        conv("root", turn(), turn(spawns=["isolated", "given"]), turn()),
        conv("isolated", turn(), turn(), context_mode="message_array_with_responses"),
        conv("given", turn(), turn(), context_mode="deltas_with_responses"),
    )
    nodes = by_name(tree)
    assert nodes["root:1"].history == tree.nodes.index(nodes["root:0"])
    assert nodes["root:1"].keep_reply
    # Sent as written: no history, though it still waits for the turn before.
    assert nodes["isolated:1"].history is None
    assert nodes["isolated:1"].deps == (tree.nodes.index(nodes["isolated:0"]),)
    # The dataset's own assistant turns stand in for the live reply.
    assert nodes["given:1"].history == tree.nodes.index(nodes["given:0"])
    assert not nodes["given:0"].keep_reply and not nodes["given:1"].keep_reply


def test_a_fork_child_of_a_conversation_that_drops_replies_sees_none():
    tree = tree_of(conv("p", turn(forks=["c"]), context_mode="deltas_with_responses"), conv("c"))
    nodes = by_name(tree)
    assert nodes["c:0"].history == tree.nodes.index(nodes["p:0"])
    assert not nodes["p:0"].keep_reply


def test_the_context_mode_rules_at_their_lines_all_at_once():
    found = problems(
        conv("p", turn(forks=["iso"]), turn(spawns=["ok"])),
        conv("iso", context_mode="message_array_with_responses"),
        conv(
            "ok",
            turn(messages=[{"role": "system", "content": "s"}, user()]),
            turn(messages=[user(), {"role": "system", "content": "late"}]),
            context_mode="message_array_with_responses",
        ),
        conv("forker", turn(forks=[{"child": "x", "background": True}]), turn(),
             context_mode="message_array_with_responses"),
        conv("x"),
        conv("never", context_mode="message_array_without_responses"),
    )  # fmt: skip
    assert [(p.line, p.message) for p in found] == [
        (1, "session 'p' turn 0 has foreground FORK branches but is not the last turn and no "
            'join is declared: a bare FORK ends the parent, so use {"child": ..., "background": '
            "true} to keep the parent running, or move the forks to the last turn"),
        (2, "session 'iso' is a FORK target, but its context_mode 'message_array_with_responses' "
            "sends its turns as written, dropping the history a FORK child continues; only a "
            "SPAWN child may start that way"),
        (3, "session 'ok' turn 1: a 'system' message must be the first of its turn's messages "
            "(message at index 1); context_mode 'message_array_with_responses' sends each turn "
            "as written, and chat templates ignore a system message after position 0"),
        (4, "session 'forker' turn 0 forks, but context_mode 'message_array_with_responses' "
            "sends each turn as written and keeps no history for a FORK child to continue; use "
            "spawns, or drop the context_mode"),
        (6, "session 'never' context_mode: context mode 'message_array_without_responses' is "
            "not supported: it would need live replies merged into each turn's full message "
            "array, which no format defines; use 'message_array_with_responses' (turns sent as "
            "written) or a deltas mode"),
    ]  # fmt: skip


def test_tools_belong_to_the_conversation_and_its_fork_children():
    tree = tree_of(
        conv(
            "p",
            turn(),
            turn(tools=TOOLS),
            turn(),
            turn(tools=OTHER, spawns=["fresh"]),
            turn(forks=["child"]),
        ),
        conv("child", turn(), turn()),
        conv("fresh"),
        conv("isolated"),
    )
    tools = {name: node.payload.tools for name, node in by_name(tree).items()}
    assert tools == {
        "p:0": None,  # nothing declared yet
        "p:1": TOOLS,
        "p:2": TOOLS,  # the latest declared, sent again
        "p:3": OTHER,
        "p:4": OTHER,
        "child:0": OTHER,  # a FORK child continues its parent's conversation
        "child:1": OTHER,
        "fresh:0": None,  # a SPAWN child starts its own
    }


def test_turns_sent_as_written_send_only_their_own_tools():
    tree = tree_of(
        conv("p", turn(tools=TOOLS), turn(), context_mode="message_array_with_responses")
    )
    assert [node.payload.tools for node in tree.nodes] == [TOOLS, None]


@pytest.mark.parametrize(
    ("mode", "second"), [(None, TOOLS), (ContextMode.MESSAGE_ARRAY_WITH_RESPONSES, None)]
)
def test_other_formats_keep_tools_along_the_history_too(mode, second):
    first = Payload.of([user()], tools=TOOLS)
    nodes = (
        GraphNode("a", first),
        GraphNode("b", Payload.of([user()]), parents=(0,), history=0),
    )
    graph = compile_sessions("s", [SessionSpec("s", nodes, context_mode=mode)])
    assert [n.payload.tools for n in graph.trees[0].nodes] == [TOOLS, second]
