"""AIPerf 0.13's orchestrator spines in dag_jsonl: what a spine compiles into (gates that send
nothing, a round of children per gate), how the engine runs it (rounds one after another, each
after its think time, fixed or drawn), and every rule an orchestrator line is held to."""

from __future__ import annotations

import json

import pytest

from dagperf.engine.think import ThinkTimes
from dagperf.graph import SENDS_NOTHING, Gate, compile_dag_jsonl
from dagperf.simulator import SimConfig, running_simulator

from dagfile import check_tree, conv, load, problems, stats, turn
from dispatch_harness import Harness
from runs import profile


def spine(sid: str = "o", **fields) -> dict:
    return {"session_id": sid, "orchestrator": True, **fields}


BRANCHES = (conv("a"), conv("b", turn(), turn()))


def test_a_spine_of_rounds_compiles_into_gates_each_joining_on_its_round():
    graph = compile_dag_jsonl(
        load(spine(spawns=["a", "b"], rounds=3, think_time_ms=150), *BRANCHES)
    )
    (tree,) = graph.trees
    check_tree(tree)
    gates = [n for n in tree.nodes if n.gate is not None]
    assert [(n.turn, n.delay_s) for n in gates] == [(0, 0.15), (1, 0.15), (2, 0.15), (3, 0.0)]
    assert all(n.gate == SENDS_NOTHING and n.history is None for n in gates)
    children = tree.sessions[1:]
    assert [(s.conversation_id, s.branch_id, s.kind) for s in children] == [
        (c, f"o:{k}", "spawn") for k in range(3) for c in ("a", "b")
    ]
    for k in (1, 2, 3):  # each gate after the first waits for the last turn of each child before
        before = children[2 * (k - 1) : 2 * k]
        assert gates[k].join_deps == tuple(s.last_node for s in before)
    # Requests are what is sent: the gates are not counted, the children of each round are.
    assert graph.shape.sizes == [9] and tree.requests == 9
    assert graph.shape.spawn_children == 6 and graph.max_depth == 1
    assert [c.conversation_id for c in graph.conversations()] == ["a", "b"]


def test_rounds_one_after_another_each_after_its_think_time():
    h = Harness(spine(spawns=["a", "b"], rounds=3, think_time_ms=150), *BRANCHES)
    assert h.sent() == []  # round 0 waits its think time too, as AIPerf's does
    assert h.advance(0.149) == []
    assert h.advance(0.001) == ["a:0", "b:0"]
    assert h.finish("a:0") == []
    assert h.finish("b:0") == ["b:1"]
    assert h.finish("b:1") == []  # the round drained: the next waits its think time
    assert h.advance(0.1) == []
    assert h.advance(0.05) == ["a:0", "b:0"]
    h.drain()
    assert h.advance(0.15) == ["a:0", "b:0"]
    h.drain()
    assert h.d.finished
    assert h.d.progress().sent == 9  # a gate is no request
    # As AIPerf counts them: each gate after the first waits for a round, the last too.
    assert h.stats == stats(
        children_spawned=6, children_completed=6, parents_suspended=3, parents_resumed=3
    )


def test_a_list_of_rounds_starts_each_rounds_own_children_after_its_own_wait():
    rounds = [
        {"spawns": ["r0"]},
        {"spawns": ["r1a", "r1b"], "think_time_ms": 300},
        {"spawns": ["r2"]},
    ]
    h = Harness(
        spine(rounds=rounds, think_time_ms=100), *(conv(c) for c in ("r0", "r1a", "r1b", "r2"))
    )
    assert h.advance(0.1) == ["r0:0"]
    assert h.finish("r0:0") == []
    assert h.advance(0.299) == []
    assert h.advance(0.001) == ["r1a:0", "r1b:0"]
    h.finish("r1a:0")
    assert h.finish("r1b:0") == []
    assert h.advance(0.1) == ["r2:0"]
    h.drain()
    assert h.d.finished


def test_a_round_waits_for_its_children_however_they_end():
    h = Harness(spine(spawns=["a", "b"], rounds=2), *BRANCHES)
    assert h.sent() == ["a:0", "b:0"]  # no think time: round 0 at once
    h.finish("a:0", ok=False)
    assert h.finish("b:0") == ["b:1"]
    assert h.finish("b:1") == ["a:0", "b:0"]
    h.drain()
    assert h.d.finished and h.stats["children_errored"] == 1


def test_an_orchestrator_without_rounds_fires_and_forgets():
    """Its one gate starts the children and ends the root at once: its slot frees, so under
    --concurrency 1 every orchestrator of the run starts without waiting for the children."""
    h = Harness(spine(spawns=["a", "b"]), *BRANCHES, concurrency=1, num_conversations=3)
    assert sorted(h.sent()) == ["a:0", "a:0", "a:0", "b:0", "b:0", "b:0"]
    while not h.d.finished:  # (three of each name in flight: completed by credit)
        for flight in h.d.in_flight():
            h.d.complete(flight.credit, ok=True)
    assert h.d.progress().sent == 9
    assert h.stats == stats(children_spawned=6, children_completed=6)


def test_a_spine_holds_its_slot_until_its_last_round_ends():
    h = Harness(spine(spawns=["a"], rounds=2), conv("a"), concurrency=1, num_conversations=2)
    assert h.sent() == ["a:0"]
    assert h.finish("a:0") == ["a:0"]  # the same spine's second round
    assert h.finish("a:0") == ["a:0"]  # the next spine's first round: its slot freed
    h.drain()
    assert h.d.finished


def test_gates_are_not_requests_under_a_cap():
    h = Harness(spine(spawns=["a", "b"], rounds=5), *BRANCHES, request_count=4)
    h.drain()
    h.drain()
    assert h.d.finished and h.d.progress().sent == 4


def test_a_stop_while_a_gate_waits_suppresses_its_join():
    h = Harness(spine(spawns=["a"], rounds=3, think_time_ms=1000), conv("a"), benchmark_duration=2)
    assert h.advance(1.0) == ["a:0"]
    assert h.finish("a:0") == []
    h.advance(1.5)  # the duration ends while the next round's gate waits its think time
    assert h.d.finished
    # Its gate had reached the join before the round drained, and never passed.
    assert h.stats == stats(
        children_spawned=1, children_completed=1, parents_suspended=1, joins_suppressed=1
    )


def test_a_conversation_joins_on_an_orchestrator_it_spawns():
    h = Harness(
        conv("p", turn(spawns=["o"]), turn()),
        spine(spawns=["a"], rounds=2),
        conv("a"),
    )
    assert h.sent() == ["p:0"]
    assert h.finish("p:0") == ["a:0"]
    assert h.finish("a:0") == ["a:0"]
    assert h.finish("a:0") == ["p:1"]  # the spine's last gate ended: the parent's join fires
    h.drain()
    assert h.d.finished


def test_a_request_reached_through_a_gate_and_its_history_is_named_once():
    # p's turn 1 waits for its turn 0 as its history, and again through the orchestrator its
    # turn 0 spawned (fire-and-forget, so the gate stands for turn 0): one wait, one name, and
    # turn 0 is named by three records (p:1 and both runs of a), as its `dependents` says.
    (tree,) = compile_dag_jsonl(
        load(conv("p", turn(spawns=["o", "a"]), turn()), spine(spawns=["a"]), conv("a"))
    ).trees
    check_tree(tree)
    names = {i: f"{tree.sessions[n.session].conversation_id}:{n.turn}" for i, n in
             enumerate(tree.nodes)}  # fmt: skip
    p1 = next(i for i, name in names.items() if name == "p:1")
    assert sorted(names[d] for d in tree.waited(p1)) == ["a:0", "p:0"]
    assert tree.named_by(tree.sessions[0].first_node) == 3


def test_drawn_think_times_are_reproducible_per_run_and_round_and_clamped():
    gate = Gate(sigma=1.0)
    seeded = ThinkTimes(42)
    draws = [seeded.draw(gate, 0.5, run, turn) for run in range(4) for turn in range(3)]
    assert draws == [ThinkTimes(42).draw(gate, 0.5, r, t) for r in range(4) for t in range(3)]
    assert len(set(draws)) == len(draws)  # every (run, turn) has its own draw
    assert draws != [ThinkTimes(43).draw(gate, 0.5, r, t) for r in range(4) for t in range(3)]
    clamped = [seeded.draw(Gate(1.0, 0.4, 0.6), 0.5, run, 0) for run in range(40)]
    assert min(clamped) == 0.4 and max(clamped) == 0.6
    assert ThinkTimes(42).draw(SENDS_NOTHING, 0.5, 0, 0) == 0.5  # fixed: the median itself
    wide = [ThinkTimes(7).draw(Gate(sigma=10.0), 0.5, r, 0) for r in range(200)]
    assert min(wide) < 0.5 < max(wide)  # a lognormal around its median, unclamped


def test_a_drawn_think_time_paces_the_rounds():
    line = spine(spawns=["a"], rounds=2, think_time_ms=100, think_time_sigma=0.5)
    h = Harness(line, conv("a"), random_seed=3)
    first = ThinkTimes(3).draw(Gate(sigma=0.5), 0.1, 0, 0)
    assert h.advance(first - 1e-6) == []
    assert h.advance(1e-6) == ["a:0"]


@pytest.mark.parametrize(
    ("line", "messages"),
    [
        (
            spine(spawns=["a"], turns=[turn()], pre_session_spawns=["b"]),
            [
                "session 'o' turns: an orchestrator authors no turns (it sends no request; its "
                "rounds start its spawns); move the turns to a conversation it spawns",
                "session 'o' pre_session_spawns: not on an orchestrator; list its children in "
                "spawns",
            ],
        ),
        (
            spine(),
            [
                "session 'o' spawns: an orchestrator needs the children it starts (or a list "
                "of rounds)"
            ],
        ),
        (
            spine(spawns=["a"], rounds=[{"spawns": ["a"]}, {"spawns": ["b", "a", "b"]}]),
            [
                "session 'o' spawns: with a list of rounds each round names its own spawns; drop "
                "the conversation-level spawns",
                "session 'o' rounds[1].spawns: child 'b' is listed twice",
                "session 'o' rounds[1].spawns: child 'a' is also in round 0; each round of a list "
                "spawns its own conversations, so its records say which round they belong to",
            ],
        ),
        (
            spine(spawns=["a", "a"], think_time_ms=5, think_time_min_ms=9, think_time_max_ms=4),
            [
                "session 'o' spawns: child 'a' is listed twice",
                "session 'o' think_time_ms: the wait before each round needs rounds; an "
                "orchestrator without them starts its spawns once",
                "session 'o' think_time_min_ms, think_time_max_ms: bounds of a drawn think time "
                "need think_time_sigma; a fixed think time has nothing to bound",
                "session 'o' think_time_min_ms: 9 is above think_time_max_ms 4",
            ],
        ),
        (
            spine(spawns=["a"], rounds=2, think_time_sigma=0.5),
            ["session 'o' think_time_sigma: needs think_time_ms, the median it draws around"],
        ),
        (
            conv("o", spawns=["a"], rounds=2, think_time_ms=10),
            [
                "session 'o' rounds: only an orchestrator has rounds (set \"orchestrator\": true)",
                "session 'o' spawns: conversation-level spawns belong to an orchestrator; a "
                "conversation spawns from its turns (turns[k].spawns)",
                "session 'o' think_time_ms: think times belong to an orchestrator with rounds",
            ],
        ),
    ],
)
def test_every_rule_of_an_orchestrator_line_at_once(line, messages):
    found = problems(line, conv("a"), conv("b"))
    assert [(p.line, p.message) for p in found] == [(1, m) for m in messages]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rounds": True}, "rounds"),
        ({"rounds": 0}, "rounds"),
        ({"rounds": []}, "rounds"),
        ({"orchestrator": 1}, "orchestrator: Input should be a valid boolean"),
        ({"rounds": 2, "think_time_ms": True}, "think_time_ms: Input should be a valid number"),
        ({"rounds": 2, "think_time_ms": -1}, "think_time_ms: Input should be greater than"),
        ({"rounds": 2, "think_time_ms": 1, "think_time_sigma": 0}, "think_time_sigma"),
        ({"rounds": 2, "think_time_ms": 1, "think_time_sigma": 11}, "think_time_sigma"),
        ({"rounds": [{"spawns": ["a"], "think_time_ms": False}]}, "rounds"),
        ({"rounds": [{"spawns": []}]}, "rounds"),
        ({"rounds": [{"spawns": ["a"], "think": 1}]}, "rounds"),
        ({"context_mode": "isolated"}, "context_mode: Input should be"),
    ],
)
def test_fields_of_the_wrong_type_are_refused_by_line(fields, message):
    line = spine(spawns=["a"], **fields) if "spawns" not in str(fields) else spine(**fields)
    found = problems(line, conv("a"))
    assert found and all(p.line == 1 for p in found), [str(p) for p in found]
    assert any(message in p.message for p in found), [str(p) for p in found]


def test_a_spawn_target_an_orchestrator_names_must_exist():
    found = problems(spine(spawns=["a", "ghost"], rounds=1), conv("a"))
    assert [(p.line, p.message.split(". Known")[0]) for p in found] == [
        (1, "session 'o' turn 0: branch target 'ghost' not declared")
    ]


def test_a_spine_in_a_large_file_read_by_blocks_and_halves(monkeypatch, tmp_path):
    """Orchestrator lines send a block down the line-by-line path; the rest stay fast, and a
    file read by two processes finds the same spines."""
    from dagperf.dataset.formats.dag_jsonl import halves
    from dagperf.dataset.formats.dag_jsonl.reader import load_dag_jsonl

    from dagfile import encode

    lines = [
        conv(f"c{i}", turn(messages=[{"role": "user", "content": "x" * 300}])) for i in range(300)
    ]
    lines.insert(250, spine("o1", spawns=["c1", "c2"], rounds=2))  # both in the later half
    lines.append(spine("o2", rounds=[{"spawns": ["c3"]}, {"spawns": ["c299"]}]))
    path = tmp_path / "d.jsonl"
    path.write_bytes(b"".join(encode(*lines)))
    whole = load_dag_jsonl(path)
    monkeypatch.setattr(halves, "SPLIT_BYTES", 1)
    halved = load_dag_jsonl(path)
    for dataset in (whole, halved):
        graph = compile_dag_jsonl(dataset)
        roots = dict(zip(dataset.roots, graph.shape.sizes, strict=True))
        assert roots["o1"] == 4 and roots["o2"] == 2 and "c1" not in roots
        assert dataset.line_of("o2") == 302
        # Read back with the conversations' own fields (o2's rounds), the second half's too.
        trees = dict(zip(dataset.roots, graph.trees, strict=True))
        assert trees["o2"].gates == 3 and trees["o2"].requests == 2


async def test_a_spine_s_records_carry_the_think_times_drawn_so_its_arrival_check_passes(
    tmp_path,
):
    """A round's requests are due its gate's think time, as drawn, after the round before
    drained: the records say so in delay_ms, and the health check holds them to it (it failed
    every spine before, each request "late" by its think time)."""
    line = spine(spawns=["a"], rounds=2, think_time_ms=100, think_time_sigma=0.5)
    async with running_simulator(SimConfig(ttft_ms=5, itl_ms=1)) as sim:
        run = await profile(sim, tmp_path, [line, conv("a")], "--random-seed", "3")
    assert run.returncode == 0, run.stderr
    delays = sorted(
        (r["metadata"]["branch_id"], r["metadata"]["delay_ms"]) for r in run.named("a:0")
    )
    drawn = [ThinkTimes(3).draw(Gate(sigma=0.5), 0.1, 0, k) * 1000 for k in (0, 1)]
    assert [b for b, _ in delays] == ["o:0", "o:1"]
    assert [d for _, d in delays] == pytest.approx(drawn) and drawn[0] != drawn[1]
    health = json.loads((run.directory / "health_check.json").read_text())
    (arrival,) = [c for c in health["checks"] if c["name"] == "intra_session_arrival"]
    assert arrival["status"] == "pass", arrival["summary"]
