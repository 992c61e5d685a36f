"""The request graph compiled from dag_jsonl: dependencies, history, routing, depth, branch ids."""

from __future__ import annotations

import pytest

from dagperf.dataset import DatasetError
from dagperf.dataset.formats.dag_jsonl import load_dag_jsonl
from dagperf.graph import SessionKind, Tree, compile_dag_jsonl

from dagfile import check_tree, conv, load, turn, user


def compile_lines(*lines) -> list[Tree]:
    graph = compile_dag_jsonl(load(*lines))
    for tree in graph.trees:
        check_tree(tree)
    return list(graph.trees)


def node_of(tree: Tree, conversation: str, turn_index: int, instance: int = 0) -> int:
    """Index of a node, by conversation id, turn and (for repeated templates) instance."""
    sessions = [s for s in tree.sessions if s.conversation_id == conversation]
    return sessions[instance].first_node + turn_index


def session_of(tree: Tree, conversation: str, instance: int = 0):
    return [s for s in tree.sessions if s.conversation_id == conversation][instance]


def test_terminal_fork_continues_the_parents_history_on_its_route():
    (tree,) = compile_lines(
        conv("root", turn(forks=["a", "b"])), conv("a", turn(), turn()), conv("b")
    )
    r0, a0, a1, b0 = (node_of(tree, c, t) for c, t in [("root", 0), ("a", 0), ("a", 1), ("b", 0)])
    assert tree.entry == (r0,)
    assert tree.nodes[a0].deps == (r0,) and tree.nodes[a0].history == r0
    assert tree.nodes[a1].deps == (a0,) and tree.nodes[a1].history == a0
    assert tree.nodes[b0].deps == (r0,) and tree.nodes[b0].history == r0
    assert tree.nodes[r0].dependents == (a0, b0)
    for name in ("a", "b"):
        session = session_of(tree, name)
        assert (session.kind, session.branch_id, session.parent, session.depth, session.route) == (
            SessionKind.FORK,
            "root:0",
            0,
            1,
            0,
        )
    assert all(not n.join_deps for n in tree.nodes)


def test_background_fork_lets_the_parent_continue_without_waiting():
    (tree,) = compile_lines(
        conv("p", turn(forks=[{"child": "c", "background": True}]), turn()),
        conv("c", turn(), turn()),
    )
    p0, p1, c0, c1 = (node_of(tree, *k) for k in [("p", 0), ("p", 1), ("c", 0), ("c", 1)])
    assert tree.nodes[p1].deps == (p0,)  # the parent does not wait for the child
    assert tree.nodes[c0].deps == (p0,) and tree.nodes[c0].history == p0
    assert tree.nodes[c1].dependents == ()  # nothing waits for the child to finish
    assert session_of(tree, "c").route == 0
    assert session_of(tree, "c").branch_id == "p:0"


def test_bare_spawn_starts_fresh_and_joins_on_the_next_turn():
    (tree,) = compile_lines(
        conv("p", turn(spawns=["c"]), turn(), turn()), conv("c", turn(), turn())
    )
    p0, p1, p2, c0, c1 = (
        node_of(tree, *k) for k in [("p", 0), ("p", 1), ("p", 2), ("c", 0), ("c", 1)]
    )
    assert tree.nodes[c0].deps == (p0,) and tree.nodes[c0].history is None
    assert tree.nodes[p1].deps == (p0,)
    assert tree.nodes[p1].join_deps == (c1,)  # the join waits for the child's last turn
    assert tree.nodes[p1].history == p0  # but continues its own history only
    assert tree.nodes[p2].deps == (p1,)
    child = session_of(tree, "c")
    assert (child.kind, child.parent, child.depth, child.route) == (SessionKind.SPAWN, 0, 1, 1)


def test_bare_spawn_on_the_last_turn_is_fire_and_forget():
    (tree,) = compile_lines(conv("p", turn(), turn(spawns=["c"])), conv("c"))
    c0 = node_of(tree, "c", 0)
    assert tree.nodes[c0].deps == (node_of(tree, "p", 1),)
    assert tree.nodes[c0].dependents == ()
    assert all(not n.join_deps for n in tree.nodes)


def test_join_at_lets_the_parent_run_the_turns_between():
    (tree,) = compile_lines(
        conv("p", turn(spawns=[{"children": ["c", "d"], "join_at": 3}]), turn(), turn(), turn()),
        conv("c", turn(), turn()),
        conv("d"),
    )
    p = [node_of(tree, "p", k) for k in range(4)]
    assert tree.nodes[p[1]].deps == (p[0],)
    assert tree.nodes[p[2]].deps == (p[1],)
    assert tree.nodes[p[3]].deps == (p[2],)
    assert tree.nodes[p[3]].join_deps == (node_of(tree, "c", 1), node_of(tree, "d", 0))


def test_fan_in_several_branches_gate_one_turn():
    (tree,) = compile_lines(
        conv(
            "p",
            turn(spawns=[{"children": ["a"], "join_at": 2}]),
            turn(spawns=["b"]),
            turn(),
        ),
        conv("a"),
        conv("b"),
    )
    p2 = node_of(tree, "p", 2)
    assert tree.nodes[p2].deps == (node_of(tree, "p", 1),)
    assert set(tree.nodes[p2].join_deps) == {node_of(tree, "a", 0), node_of(tree, "b", 0)}


def test_multi_consumer_a_spawn_template_runs_once_per_reference():
    (tree_a, tree_b) = compile_lines(
        conv("A", turn(spawns=["critic"]), turn(spawns=["critic"]), turn()),
        conv("B", turn(spawns=["critic"]), turn()),
        conv("critic", turn(), turn()),
    )
    first, second = session_of(tree_a, "critic", 0), session_of(tree_a, "critic", 1)
    assert first.first_node != second.first_node
    assert (first.branch_id, second.branch_id) == ("A:0", "A:1")
    assert tree_a.nodes[node_of(tree_a, "A", 1)].join_deps == (first.last_node,)
    assert tree_a.nodes[node_of(tree_a, "A", 2)].join_deps == (second.last_node,)
    assert session_of(tree_b, "critic").branch_id == "B:0"


def test_one_node_feeds_several_consumers():
    """The forking turn releases the parent's next turn and both children at once."""
    (tree,) = compile_lines(
        conv("p", turn(forks=[{"child": "a", "background": True}], spawns=["b"]), turn()),
        conv("a"),
        conv("b"),
    )
    p0 = node_of(tree, "p", 0)
    assert set(tree.nodes[p0].dependents) == {
        node_of(tree, "p", 1),
        node_of(tree, "a", 0),
        node_of(tree, "b", 0),
    }
    assert session_of(tree, "a").branch_id == "p:0:bg_fork"
    assert session_of(tree, "b").branch_id == "p:0:spawn"


def test_pre_session_spawns_go_first_with_no_parent_and_gate_nothing():
    (tree,) = compile_lines(conv("r", turn(), pre_session_spawns=["x", "y"]), conv("x"), conv("y"))
    x0, y0, r0 = node_of(tree, "x", 0), node_of(tree, "y", 0), node_of(tree, "r", 0)
    assert tree.entry == (x0, y0, r0)
    for name in ("x", "y"):
        session = session_of(tree, name)
        assert (session.kind, session.parent, session.depth, session.branch_id) == (
            SessionKind.SPAWN,
            None,
            1,
            "r:pre",
        )
        assert session.route == tree.sessions.index(session)
    assert tree.nodes[r0].deps == () and tree.nodes[x0].dependents == ()


def test_pre_session_spawns_of_a_child_are_released_with_it():
    (tree,) = compile_lines(
        conv("r", turn(forks=["c"])), conv("c", pre_session_spawns=["x"]), conv("x")
    )
    r0, c0, x0 = node_of(tree, "r", 0), node_of(tree, "c", 0), node_of(tree, "x", 0)
    assert tree.nodes[x0].deps == (r0,) and tree.nodes[x0].history is None
    assert tree.nodes[r0].dependents == (x0, c0)  # sent before the child's turn 0


def test_nested_trees_keep_fork_lineage_routes_and_count_depth():
    (tree,) = compile_lines(
        conv("root", turn(spawns=["agent"]), turn(forks=["f1"])),
        conv("f1", turn(forks=["f2"])),
        conv("f2"),
        conv("agent", turn(forks=["af"])),
        conv("af", turn(spawns=["leaf"]), turn()),
        conv("leaf"),
    )
    route = {s.conversation_id: tree.sessions[s.route].conversation_id for s in tree.sessions}
    depth = {s.conversation_id: s.depth for s in tree.sessions}
    assert route == {
        "root": "root",
        "f1": "root",
        "f2": "root",
        "agent": "agent",
        "af": "agent",
        "leaf": "leaf",
    }
    assert depth == {"root": 0, "agent": 1, "f1": 1, "f2": 2, "af": 2, "leaf": 3}
    assert tree.nodes[node_of(tree, "f2", 0)].history == node_of(tree, "f1", 0)
    assert tree.nodes[node_of(tree, "af", 0)].history == node_of(tree, "agent", 0)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"forks": ["a"]}, {"a": "p:1"}),
        ({"spawns": ["a"]}, {"a": "p:1"}),
        ({"forks": ["a"], "spawns": ["b"]}, {"a": "p:1:fork", "b": "p:1:spawn"}),
        (
            {"forks": ["a", {"child": "b", "background": True}]},
            {"a": "p:1:fork", "b": "p:1:bg_fork"},
        ),
        ({"spawns": ["a", {"children": ["b"]}]}, {"a": "p:1:spawn", "b": "p:1:spawn1"}),
    ],
)
def test_branch_ids(fields, expected):
    tree = compile_lines(conv("p", turn(), turn(**fields)), conv("a"), conv("b"))[0]
    assert {s.conversation_id: s.branch_id for s in tree.sessions[1:]} == expected


def test_payload_and_delay_come_from_the_authored_turn():
    tool = {"type": "function", "function": {"name": "f"}}
    (tree,) = compile_lines(
        conv(
            "p",
            turn(
                messages=[user("x")],
                model="m",
                max_tokens=9,
                tools=[tool],
                extra={"seed": 1},
                delay=250,
            ),
        )
    )
    node = tree.nodes[0]
    assert (node.payload.messages, node.payload.model, node.payload.max_tokens) == (
        [user("x")],
        "m",
        9,
    )
    assert (node.payload.tools, node.payload.extra, node.delay_s) == ([tool], {"seed": 1}, 0.25)


def test_graph_counts():
    graph = compile_dag_jsonl(load_dag_jsonl("examples/dag_jsonl/three-roots.dag.jsonl"))
    assert (graph.root_count, graph.request_count, graph.max_depth) == (3, 9, 1)
    assert (graph.child_count(SessionKind.FORK), graph.child_count(SessionKind.SPAWN)) == (6, 0)


def test_roots_are_conversations_nobody_references():
    dataset = load(
        conv("a", turn(spawns=["b"]), turn()),
        conv("b"),
        conv("c", pre_session_spawns=["d"]),
        conv("d"),
    )
    assert dataset.roots == ["a", "c"]
    assert compile_dag_jsonl(dataset).root_count == 2


def test_shared_spawn_templates_that_explode_are_refused():
    # Each level spawns the next twice: 2**20 sessions from 21 lines.
    lines = [
        conv(f"l{i}", turn(spawns=[f"l{i + 1}"]), turn(spawns=[f"l{i + 1}"])) for i in range(20)
    ]
    dataset = load(*lines, conv("l20"))
    with pytest.raises(DatasetError) as caught:
        compile_dag_jsonl(dataset, max_tree_requests=100_000)
    (problem,) = caught.value.problems
    assert problem.line == 1
    assert problem.message.startswith("session 'l0' expands to more than 100,000 requests per run")


def test_a_very_deep_fork_chain_needs_no_recursion():
    depth = 5000
    lines = [conv(f"s{i}", turn(forks=[f"s{i + 1}"])) for i in range(depth)] + [conv(f"s{depth}")]
    (tree,) = compile_lines(*lines)
    assert tree.sessions[-1].depth == depth
    assert {s.route for s in tree.sessions} == {0}
