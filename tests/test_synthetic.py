"""Synthetic session generators: shapes, waits, prompts, determinism, and the config file."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from dagperf.dataset.text import text_tokens
from dagperf.graph.sessions import ContextMode, SessionSpec, compile_sessions
from dagperf.synthetic import (
    ConfigError,
    generate_sessions,
    load_session_config,
    parse_session_config,
)

EXAMPLES = Path(__file__).parent.parent / "examples" / "session_configs"


def fixed(value):
    return {"type": "fixed", "value": value}


def stair(values, repeat=1):
    return {"type": "stair", "values": values, "repeat": repeat}


def generate(graph: dict, **settings) -> list[SessionSpec]:
    config = parse_session_config({"session_graph": graph, **settings})
    sessions = generate_sessions(config)
    compile_sessions("test", sessions)  # raises on a malformed session
    return sessions


def branching(layers=4, width=3, fan_in=1, fan_out=1, distance=1, **more) -> dict:
    """A branching graph; a number stands for a fixed distribution."""

    def dist(value):
        return fixed(value) if isinstance(value, int) else value

    return {
        "type": "branching",
        "num_layers_generator": dist(layers),
        "layer_width_generator": dist(width),
        "fan_in_generator": dist(fan_in),
        "fan_out_generator": dist(fan_out),
        "connection_dist_generator": dist(distance),
        **more,
    }


def layer_of(session: SessionSpec) -> list[int]:
    """Each node's layer, from its key `L<layer>.<index>`."""
    return [int(node.key[1:].split(".")[0]) for node in session.nodes]


def layers(session: SessionSpec) -> list[list[int]]:
    found = layer_of(session)
    return [[i for i, layer in enumerate(found) if layer == n] for n in range(max(found) + 1)]


def children(session: SessionSpec) -> list[set[int]]:
    out: list[set[int]] = [set() for _ in session.nodes]
    for i, node in enumerate(session.nodes):
        for parent in node.parents:
            out[parent].add(i)
    return out


def tokens(node) -> list[str]:
    return text_tokens(node.payload.messages[0]["content"])


def common_prefix(a: list[str], b: list[str]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


# --- single_request and linear -------------------------------------------------------------


def test_single_request_sessions_have_one_root_node():
    sessions = generate({"type": "single_request"}, num_sessions=7)
    assert [s.session_id for s in sessions] == [f"syn-{i:06d}" for i in range(1, 8)]
    for session in sessions:
        [node] = session.nodes
        assert (node.key, node.parents, node.history, node.wait_s) == ("n0", (), None, 0.0)


def test_linear_is_a_chain_continuing_each_previous_turn():
    sessions = generate({"type": "linear", "num_request_generator": fixed(4)}, num_sessions=5)
    for session in sessions:
        assert [n.key for n in session.nodes] == ["n0", "n1", "n2", "n3"]
        assert [n.parents for n in session.nodes] == [(), (0,), (1,), (2,)]
        assert [n.history for n in session.nodes] == [None, 0, 1, 2]


def test_linear_without_history_starts_each_turn_fresh():
    graph = {"type": "linear", "num_request_generator": fixed(3), "inherit_history": False}
    for session in generate(graph, num_sessions=3):
        assert [n.parents for n in session.nodes] == [(), (0,), (1,)]
        assert [n.history for n in session.nodes] == [None, None, None]


def test_linear_lengths_follow_a_stair_across_sessions():
    graph = {"type": "linear", "num_request_generator": stair([2, 5, 1], repeat=2)}
    sessions = generate(graph, num_sessions=9)
    assert [len(s.nodes) for s in sessions] == [2, 2, 5, 5, 1, 1, 2, 2, 5]


def test_waits_come_from_the_wait_distribution_and_roots_do_not_wait():
    graph = {
        "type": "linear",
        "num_request_generator": fixed(3),
        "request_wait_generator": stair([0.5, 1.5, 2.5]),
    }
    sessions = generate(graph, num_sessions=4)
    assert all(s.nodes[0].wait_s == 0.0 for s in sessions)
    waits = [n.wait_s for s in sessions for n in s.nodes[1:]]
    assert waits == list(itertools.islice(itertools.cycle([0.5, 1.5, 2.5]), len(waits)))


def test_poisson_waits_average_one_over_the_rate():
    graph = {
        "type": "linear",
        "num_request_generator": fixed(11),
        "request_wait_generator": {"type": "poisson", "arrival_rate": 2.0},
    }
    waits = [n.wait_s for s in generate(graph, num_sessions=400) for n in s.nodes[1:]]
    assert len(waits) == 4000
    assert sum(waits) / len(waits) == pytest.approx(0.5, rel=0.08)


# --- branching ------------------------------------------------------------------------------


@pytest.mark.parametrize("single_root", [False, True])
def test_branching_layers_have_the_fixed_width(single_root):
    graph = branching(layers=5, width=3, single_root=single_root)
    for session in generate(graph, num_sessions=20):
        widths = [len(layer) for layer in layers(session)]
        assert widths == [1 if single_root else 3, 3, 3, 3, 3]
        roots = [i for i, node in enumerate(session.nodes) if not node.parents]
        assert roots == layers(session)[0]
        assert layer_of(session) == sorted(layer_of(session))  # listed layer by layer


def test_branching_widths_follow_the_width_distribution():
    graph = branching(layers=6, width={"type": "uniform", "min": 2, "max": 4})
    seen = set()
    for session in generate(graph, num_sessions=30):
        widths = [len(layer) for layer in layers(session)]
        assert len(widths) == 6 and all(2 <= w <= 4 for w in widths)
        seen.update(widths)
    assert seen == {2, 3, 4}


@pytest.mark.parametrize(("fan_in", "fan_out"), [(1, 1), (2, 1), (2, 3), (3, 2)])
def test_branching_fan_in_and_fan_out_are_minimums(fan_in, fan_out):
    graph = branching(layers=5, width={"type": "uniform", "min": 1, "max": 4}, fan_in=fan_in)
    graph["fan_out_generator"] = fixed(fan_out)
    for session in generate(graph, num_sessions=30):
        found, below = layer_of(session), children(session)
        last = max(found)
        for i, node in enumerate(session.nodes):
            earlier = sum(1 for layer in found if layer < found[i])
            later = sum(1 for layer in found if layer > found[i])
            assert len(set(node.parents)) == len(node.parents)
            assert all(found[p] < found[i] for p in node.parents)  # strictly earlier layers
            if found[i] > 0:
                assert len(node.parents) >= min(fan_in, earlier)
            if found[i] < last:
                assert len(below[i]) >= min(fan_out, later) >= 1  # no dead end before the last


def test_branching_edges_span_the_skip_distance():
    # Width 3 with fan-in 1 and fan-out 2: the target layer always has room, so no fallback.
    graph = branching(layers=6, width=3, fan_in=1, fan_out=2, distance=2)
    spans = set()
    for session in generate(graph, num_sessions=30):
        found = layer_of(session)
        last = max(found)
        for i, node in enumerate(session.nodes):
            for p in node.parents:
                span = found[i] - found[p]
                spans.add(span)
                # A fan-in edge spans 2 clipped to the child's layer; a fan-out edge 2 clipped
                # to the layers left after the parent's.
                assert span in (min(2, found[i]), min(2, last - found[p]))
    assert spans == {1, 2}


def test_branching_falls_back_to_nearer_then_farther_layers():
    graph = branching(layers=3, width=2, fan_in=3, fan_out=1, distance=1, single_root=True)
    for session in generate(graph, num_sessions=10):
        assert [n.key for n in session.nodes] == ["L0.0", "L1.0", "L1.1", "L2.0", "L2.1"]
        assert [n.parents for n in session.nodes[1:3]] == [(0,), (0,)]  # only one node before
        # Layer 1 has two nodes, so the third parent comes from layer 0.
        assert [n.parents for n in session.nodes[3:]] == [(0, 1, 2), (0, 1, 2)]


@pytest.mark.parametrize("inherit", [True, False])
def test_branching_history_is_one_parent_or_none(inherit):
    graph = branching(layers=5, width=3, fan_in=2, fan_out=2, inherit_history=inherit)
    choices = set()
    for session in generate(graph, num_sessions=20):
        for node in session.nodes:
            if not node.parents or not inherit:
                assert node.history is None
            else:
                assert node.history in node.parents
                choices.add(node.parents.index(node.history))
    if inherit:
        assert {0, 1} <= choices  # drawn at random, not always the first
    else:
        assert choices == set()


def test_branching_single_root_reaches_every_node():
    graph = branching(layers=5, width=3, fan_in=1, fan_out=1, distance=2, single_root=True)
    for session in generate(graph, num_sessions=20):
        reached = {0}
        for i, node in enumerate(session.nodes):
            if i and any(p in reached for p in node.parents):
                reached.add(i)
        assert reached == set(range(len(session.nodes)))


# --- prompts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "graph",
    [
        {"type": "single_request"},
        {"type": "linear", "num_request_generator": fixed(3)},
        branching(layers=3, width=2),
    ],
)
def test_prompts_have_the_drawn_lengths(graph):
    prompt = {
        "input_length": stair([7, 30, 1, 12]),
        "output_length": stair([5, 9]),
        "ignore_eos": True,
    }
    nodes = [n for s in generate(graph, num_sessions=6, prompt=prompt) for n in s.nodes]
    assert [len(tokens(n)) for n in nodes] == [[7, 30, 1, 12][i % 4] for i in range(len(nodes))]
    assert [n.payload.max_tokens for n in nodes] == [[5, 9][i % 2] for i in range(len(nodes))]
    for node in nodes:
        assert [m["role"] for m in node.payload.messages] == ["user"]
        assert node.payload.extra == {"ignore_eos": True}


def test_without_ignore_eos_there_is_no_extra():
    sessions = generate({"type": "single_request"}, num_sessions=2)
    assert [s.nodes[0].payload.extra for s in sessions] == [None, None]
    assert [s.nodes[0].payload.max_tokens for s in sessions] == [64, 64]


def test_roots_share_exactly_the_prefix_and_other_prompts_none_of_it():
    graph = branching(layers=3, width=2, fan_in=1)  # two roots per session
    prompt = {"input_length": fixed(40), "shared_prefix_ratio": 0.25}
    sessions = generate(graph, num_sessions=10, prompt=prompt)
    roots = [tokens(n) for s in sessions for n in s.nodes if not n.parents]
    others = [tokens(n) for s in sessions for n in s.nodes if n.parents]
    assert len(roots) == 20 and len(others) == 40
    for a, b in itertools.combinations(roots, 2):
        assert common_prefix(a, b) == 10
    for a, b in itertools.product(roots, others):
        assert common_prefix(a, b) == 0
    for a, b in itertools.combinations(others, 2):
        assert common_prefix(a, b) == 0


def test_shared_prefix_scales_with_each_roots_length():
    prompt = {"input_length": stair([20, 60, 33]), "shared_prefix_ratio": 0.5}
    roots = [tokens(s.nodes[0]) for s in generate({"type": "single_request"}, prompt=prompt)]
    assert [len(r) for r in roots[:3]] == [20, 60, 33]
    assert common_prefix(roots[0], roots[1]) == 10
    assert common_prefix(roots[1], roots[2]) == 16  # round(16.5) to even
    assert common_prefix(roots[1], roots[4]) == 30  # two 60-token roots


def test_without_a_shared_prefix_roots_share_nothing():
    roots = [tokens(s.nodes[0]) for s in generate({"type": "single_request"}, num_sessions=30)]
    assert all(common_prefix(a, b) == 0 for a, b in itertools.combinations(roots, 2))


def test_a_full_shared_prefix_makes_equal_roots():
    prompt = {"input_length": fixed(12), "shared_prefix_ratio": 1}
    sessions = generate({"type": "single_request"}, num_sessions=3, prompt=prompt)
    assert len({s.nodes[0].payload.messages[0]["content"] for s in sessions}) == 1


# --- determinism and compilation ------------------------------------------------------------

VARIED = {
    "session_graph": branching(
        layers={"type": "uniform", "min": 2, "max": 5},
        width={"type": "zipf", "min": 1, "max": 4},
        request_wait_generator={"type": "gamma", "shape": 2, "scale": 0.5},
    ),
    "prompt": {
        "input_length": {"type": "uniform", "min": 5, "max": 50},
        "shared_prefix_ratio": 0.3,
    },
    "num_sessions": 20,
}


def test_the_same_seed_gives_the_same_sessions_and_another_seed_others():
    first = generate_sessions(parse_session_config({**VARIED, "seed": 5}))
    assert generate_sessions(parse_session_config({**VARIED, "seed": 5})) == first
    other = generate_sessions(parse_session_config({**VARIED, "seed": 6}))
    shapes = [[(n.parents, n.history) for n in s.nodes] for s in first]
    assert [[(n.parents, n.history) for n in s.nodes] for s in other] != shapes
    texts = {n.payload.messages[0]["content"] for s in first for n in s.nodes}
    assert texts.isdisjoint(n.payload.messages[0]["content"] for s in other for n in s.nodes)


def test_more_sessions_extend_the_list_without_changing_the_first():
    few = generate_sessions(parse_session_config({**VARIED, "num_sessions": 5}))
    assert generate_sessions(parse_session_config(VARIED))[:5] == few


def test_changing_prompt_lengths_keeps_the_shapes():
    longer = {**VARIED, "prompt": {"input_length": fixed(99)}}
    a, b = (generate_sessions(parse_session_config(c)) for c in (VARIED, longer))
    assert [[n[2:] for n in s.nodes] for s in a] == [[n[2:] for n in s.nodes] for s in b]


@pytest.mark.parametrize("mode", [None, *list(ContextMode)[:3]])
def test_sessions_compile_with_their_context_mode(mode):
    config = parse_session_config({**VARIED, "context_mode": mode})
    sessions = generate_sessions(config)
    assert {s.context_mode for s in sessions} == {mode}
    graph = compile_sessions("synthetic", sessions)
    assert graph.root_count == 20
    assert graph.request_count == sum(len(s.nodes) for s in sessions)


@pytest.mark.parametrize("name", ["linear", "branching"])
def test_the_examples_load_and_compile(name):
    config = load_session_config(EXAMPLES / f"{name}.yaml")
    assert config.session_graph.type == name
    graph = compile_sessions(name, generate_sessions(config))
    assert graph.root_count == config.num_sessions


# --- the config file ------------------------------------------------------------------------


def problems(data) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_session_config(data, "cfg.yaml")
    assert str(caught.value).splitlines() == [f"cfg.yaml: {p}" for p in caught.value.problems]
    return caught.value.problems


def test_a_bad_field_is_named_by_its_path_in_the_file():
    graph = branching(fan_in=0)
    assert problems({"session_graph": graph}) == [
        "session_graph.fan_in_generator.value: a count must be a whole number of at least 1, got 0"
    ]


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"session_graph": {"type": "tree"}}, "session_graph.type"),
        ({"session_graph": {}}, "session_graph.type"),
        ({}, "session_graph"),
        ({"session_graph": {"type": "single_request"}, "sessions": 3}, "sessions"),
        ({"session_graph": {"type": "single_request"}, "num_sessions": 0}, "num_sessions"),
        ({"session_graph": {"type": "single_request"}, "seed": "7"}, "seed"),
        ({"session_graph": branching(width=[2])}, "session_graph.layer_width_generator"),
        (
            {"session_graph": {"type": "linear", "num_request_generator": stair([2, 1.5])}},
            "session_graph.num_request_generator.values.1",
        ),
        (
            {
                "session_graph": branching(
                    request_wait_generator={"type": "zipf", "min": 1, "max": 2}
                )
            },
            "session_graph.request_wait_generator.type",
        ),
        (
            {
                "session_graph": {"type": "single_request"},
                "prompt": {"input_length": {"type": "poisson", "arrival_rate": 1}},
            },
            "prompt.input_length.type",
        ),
        (
            {"session_graph": {"type": "single_request"}, "prompt": {"shared_prefix_ratio": 1.5}},
            "prompt.shared_prefix_ratio",
        ),
        (
            {"session_graph": {"type": "single_request"}, "context_mode": "nope"},
            "context_mode",
        ),
    ],
)
def test_each_problem_names_its_path(data, path):
    [problem] = problems(data)
    assert problem.startswith(f"{path}: ")


def test_every_problem_is_reported():
    graph = branching(fan_in=0, distance=0, unknown=1)
    found = problems({"session_graph": graph, "num_sessions": -1})
    assert sorted(p.split(":")[0] for p in found) == [
        "num_sessions",
        "session_graph.connection_dist_generator.value",
        "session_graph.fan_in_generator.value",
        "session_graph.unknown",
    ]


def test_the_refused_context_mode_is_explained():
    data = {
        "session_graph": {"type": "single_request"},
        "context_mode": "message_array_without_responses",
    }
    [problem] = problems(data)
    assert problem.startswith("context_mode: ") and "not supported" in problem


def test_a_document_that_is_not_a_mapping_is_refused():
    assert problems([1, 2]) == ["expected a mapping of settings, got a list"]
    assert "empty" in problems(None)[0]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def load_problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_session_config(path)
    assert str(caught.value).startswith(f"{path}: ")
    return caught.value.problems


def test_yaml_and_json_files_load(tmp_path):
    yaml_file = write(
        tmp_path,
        "c.yaml",
        "seed: 3\nnum_sessions: 4\nsession_graph:\n  type: linear\n"
        "  num_request_generator: {type: fixed, value: 2}\ncontext_mode: deltas_with_responses\n",
    )
    json_file = write(
        tmp_path,
        "c.json",
        json.dumps(
            {
                "seed": 3,
                "num_sessions": 4,
                "session_graph": {"type": "linear", "num_request_generator": fixed(2)},
                "context_mode": "deltas_with_responses",
            }
        ),
    )
    assert load_session_config(yaml_file) == load_session_config(json_file)
    assert load_session_config(yaml_file).context_mode is ContextMode.DELTAS_WITH_RESPONSES


def test_a_yaml_syntax_error_names_its_line(tmp_path):
    path = write(tmp_path, "c.yaml", "seed: 1\nsession_graph: {type: linear}\nnum_sessions: 3: 4\n")
    [problem] = load_problems(path)
    assert problem == "line 3, column 16: invalid YAML: mapping values are not allowed here"


def test_a_key_given_twice_is_refused_with_its_line(tmp_path):
    path = write(tmp_path, "c.yaml", "seed: 1\nsession_graph: {type: single_request}\nseed: 2\n")
    assert load_problems(path) == [
        "line 3, column 1: invalid YAML: key 'seed' given twice in one mapping"
    ]


def test_a_bad_field_in_a_file_names_the_file_and_path(tmp_path):
    text = "session_graph:\n  type: linear\n  num_request_generator: {type: fixed, value: 0}\n"
    [problem] = load_problems(write(tmp_path, "c.yaml", text))
    assert problem.startswith("session_graph.num_request_generator.value: ")


def test_an_unreadable_file_is_a_config_error(tmp_path):
    [problem] = load_problems(tmp_path / "missing.yaml")
    assert problem == "cannot read the session config: No such file or directory"
    [problem] = load_problems(write(tmp_path, "empty.yaml", ""))
    assert problem.startswith("empty")
