"""Veeksha benchmark configs taken as is by --session-config: the synthetic generator becomes the
same sessions as dagperf's own config says, trace generators read their file by flavour, and
what dagperf cannot do is refused with its path."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from dagperf.dataset import DatasetError
from dagperf.load import resolve_load
from dagperf.sources import synthetic_graph
from dagperf.vocabulary.config import LoadConfig

ROOT = Path(__file__).resolve().parent.parent


def graph_of(tmp_path: Path, config: dict, name: str = "c.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    return synthetic_graph(path)


def shape(graph) -> list[list[tuple]]:
    """What each tree sends: per node, its messages, token limit, history and wait."""
    return [
        [(n.payload.messages, n.payload.max_tokens, n.history, n.delay_s) for n in tree.nodes]
        for tree in graph.trees
    ]


LINEAR = {"type": "linear", "num_request_generator": {"type": "uniform", "min": 1, "max": 3},
          "inherit_history": True}  # fmt: skip


def test_a_synthetic_generator_sends_what_dagperf_s_own_config_says(tmp_path):
    veeksha = {
        "seed": 3, "runtime": {"max_sessions": 5}, "client": {"type": "openai_chat_completions"},
        "session_generator": {
            "type": "synthetic", "session_graph": LINEAR,
            "channels": [{"type": "text", "shared_prefix_ratio": 0.5,
                          "body_length_generator": {"type": "fixed", "value": 40}}],
            "output_spec": {"text": {"output_length_generator": {"type": "fixed", "value": 9}}},
        },
    }  # fmt: skip
    own = {"seed": 3, "num_sessions": 5, "session_graph": LINEAR,
           "prompt": {"input_length": {"type": "fixed", "value": 40}, "shared_prefix_ratio": 0.5,
                      "output_length": {"type": "fixed", "value": 9}}}  # fmt: skip
    assert shape(graph_of(tmp_path, veeksha, "v.yaml")) == shape(graph_of(tmp_path, own))


def test_lengths_veeksha_leaves_out_are_veeksha_s_defaults(tmp_path):
    graph = graph_of(
        tmp_path,
        {"session_generator": {"type": "synthetic", "session_graph": {"type": "single_request"}}},
    )
    limits = {n.payload.max_tokens for tree in graph.trees for n in tree.nodes}
    assert limits <= set(range(6, 13)) and len(limits) > 1  # uniform 6 to 12
    assert graph.root_count == 100  # dagperf's number of sessions when runtime sets none


def test_trace_generators_read_their_file_by_flavour(tmp_path):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "log.csv").write_text("input_length,output_length\n30,5\n12,4\n")
    log = {"type": "trace", "trace_file": "traces/log.csv", "flavor": {"type": "request_log"}}
    graph = graph_of(tmp_path, {"session_generator": log})
    assert [[n.payload.max_tokens for n in t.nodes] for t in graph.trees] == [[5], [4]]
    chat = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a b"}]
    (tmp_path / "chats.jsonl").write_text(json.dumps({"dialog": chat}) + "\n")
    flavor = {"type": "untimed_content_multi_turn", "conversation_column": "dialog",
              "role_key": "role", "content_key": "content", "user_role_value": "user",
              "assistant_role_value": "assistant"}  # fmt: skip
    graph = graph_of(tmp_path, {"session_generator": {
        "type": "trace", "trace_file": "chats.jsonl", "flavor": flavor}})  # fmt: skip
    (node,) = graph.trees[0].nodes
    assert node.payload.messages == [{"role": "user", "content": "q"}]
    assert node.payload.max_tokens == 2


def test_the_examples_load():
    for name in ("synthetic.yaml", "trace.yaml", "rag.yaml"):
        assert synthetic_graph(ROOT / "examples" / "veeksha" / name).request_count > 0


@pytest.mark.parametrize(
    ("generator", "said"),
    [
        ({"type": "lmeval", "tasks": "hellaswag"},
         "session_generator.tasks: expected a list of task names"),
        ({"type": "lmeval", "limit": 5}, "session_generator.limit: unknown field"),
        ({"type": "synthetic", "session_graph": LINEAR, "channels": [{"type": "image"}]},
         "session_generator.channels[0].type: only text is supported"),
        ({"type": "synthetic", "session_graph": LINEAR,
          "channels": [{"type": "text", "shared_prefix_probability": 0.5}]},
         "session_generator.channels[0].shared_prefix_probability: only 1.0"),
        ({"type": "synthetic"}, "session_generator.session_graph: required"),
        ({"type": "trace", "trace_file": "x.jsonl", "flavor": {"type": "sharegpt"}},
         "session_generator.flavor.type: 'sharegpt' is not supported"),
        ({"type": "trace", "trace_file": "x.jsonl",
          "flavor": {"type": "shared_prefix", "block_size": "512"}},
         "session_generator.flavor.block_size: expected a whole number, got '512'"),
        ({"type": "trace", "trace_file": "x.jsonl",
          "flavor": {"type": "shared_prefix", "block_size": 0}},
         "session_generator.flavor.block_size: must be between 1 and 10,000,000, got 0"),
        ({"type": "trace", "trace_file": "x.jsonl",
          "flavor": {"type": "rag", "num_documents": 2.5}},
         "session_generator.flavor.num_documents: expected a whole number, got 2.5"),
        ({"type": "trace", "trace_file": "x.jsonl",
          "flavor": {"type": "rag", "block_size": 16}},
         "session_generator.flavor.block_size: unknown field"),
        ({"type": "trace"}, "session_generator.trace_file: required"),
        ({"type": "synthetic", "session_graph": LINEAR, "channelz": []},
         "session_generator.channelz: unknown field"),
    ],
)  # fmt: skip
def test_what_dagperf_cannot_do_is_refused_with_its_path(tmp_path, generator, said):
    with pytest.raises(DatasetError) as caught:
        graph_of(tmp_path, {"session_generator": generator})
    assert said in str(caught.value)


def test_an_lmeval_generator_s_fields_are_checked_in_one_pass_before_lm_eval_is_needed(tmp_path):
    generator = {"type": "lmeval", "tasks": [], "num_fewshot": -1, "include_path": "no/such/dir"}
    with pytest.raises(DatasetError) as caught:
        graph_of(tmp_path, {"session_generator": generator, "runtime": {"max_sessions": 0}})
    assert [p.message for p in caught.value.problems] == [
        "session_generator.tasks: expected a list of task names",
        "session_generator.num_fewshot: expected a whole number, 0 or more",
        f"session_generator.include_path: no such directory: {tmp_path / 'no/such/dir'}",
        "runtime.max_sessions: expected a number of documents, or -1 for all",
    ]


def test_without_lm_eval_an_lmeval_config_says_how_to_install_it(tmp_path, monkeypatch):
    for name in [n for n in sys.modules if n == "lm_eval" or n.startswith("lm_eval.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # what an install without the extra has
    with pytest.raises(DatasetError) as caught:
        graph_of(tmp_path, {"session_generator": {"type": "lmeval", "tasks": ["hellaswag"]}})
    assert [p.message for p in caught.value.problems] == [
        "session_generator.type: lmeval reads lm-eval-harness tasks, and lm_eval is not "
        "installed: pip install 'dagperf[lmeval]' (in a checkout: pip install -e '.[lmeval]')"
    ]


def test_a_key_veeksha_does_not_have_is_unknown(tmp_path):
    with pytest.raises(DatasetError, match="trafic_scheduler: unknown field"):
        graph_of(tmp_path, {"trafic_scheduler": {}, "session_generator": {"type": "synthetic"}})


def test_a_failure_cancels_its_session_as_in_veeksha_unless_the_config_or_the_flag_says_not(
    tmp_path,
):
    one = {"type": "synthetic", "session_graph": {"type": "single_request"}}
    default = graph_of(tmp_path, {"session_generator": one})
    off = graph_of(tmp_path, {"session_generator": one, "traffic_scheduler": {
        "type": "concurrent", "cancel_session_on_failure": False}})  # fmt: skip
    (tmp_path / "log.csv").write_text("input_length,output_length\n30,5\n")
    trace = {"type": "trace", "trace_file": "log.csv", "flavor": {"type": "request_log"}}
    traced = graph_of(tmp_path, {"session_generator": trace, "traffic_scheduler": None})
    own = graph_of(tmp_path, {"session_graph": {"type": "single_request"}})
    assert [g.cancel_session_on_failure for g in (default, off, traced, own)] == [
        True, False, True, None,
    ]  # fmt: skip
    # the session config's word is the default; the flag, either way, wins
    assert resolve_load(LoadConfig(), default).cancel_session_on_failure is True
    assert resolve_load(LoadConfig(), off).cancel_session_on_failure is False
    assert resolve_load(LoadConfig(), own).cancel_session_on_failure is False
    flag_off = LoadConfig(cancel_session_on_failure=False)
    assert resolve_load(flag_off, default).cancel_session_on_failure is False
    flag_on = LoadConfig(cancel_session_on_failure=True)
    assert resolve_load(flag_on, off).cancel_session_on_failure is True


def test_cancel_session_on_failure_must_be_true_or_false(tmp_path):
    config = {"session_generator": {"type": "synthetic", "session_graph": LINEAR},
              "traffic_scheduler": {"cancel_session_on_failure": "yes"}}  # fmt: skip
    with pytest.raises(DatasetError) as caught:
        graph_of(tmp_path, config)
    assert "traffic_scheduler.cancel_session_on_failure: expected true or false, got 'yes'" in str(
        caught.value
    )
