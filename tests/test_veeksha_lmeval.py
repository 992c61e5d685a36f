"""Veeksha's lmeval session generator: lm-eval-harness tasks become one session per document, each
request the task's own context (description, few-shot examples, the document) with the task's
generation limits. The tasks are local (tests/lmeval_tasks/, JSON lines read from the repository's
root, Hugging Face offline). Needs the lmeval extra; the checks that do not (the fields, the
install note) are in test_veeksha_configs.py."""

from __future__ import annotations

import asyncio
import os
import sys
from itertools import permutations
from pathlib import Path

import pytest
import yaml

from dagperf.dataset import DatasetError
from dagperf.simulator import running_simulator
from dagperf.sources import synthetic_graph

from runs import RECORDING, Run, finish

pytest.importorskip("lm_eval", reason="the lmeval extra: pip install -e '.[lmeval]'")

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "tests" / "lmeval_tasks"

DESCRIPTION = "Answer with a number.\n\n"
QUESTIONS = ["What is 2 + 3?", "What is 7 - 4?", "What is 6 * 2?", "What is 9 / 3?"]
SHOTS = [("What is 1 + 1?", "2"), ("What is 5 - 1?", "4"), ("What is 3 * 3?", "9"),
         ("What is 8 / 2?", "4"), ("What is 4 + 6?", "10"), ("What is 10 - 3?", "7")]  # fmt: skip


def context(question: str, shots: list[tuple[str, str]]) -> str:
    """What lm-eval makes of a dagperf_arith document: written out here, not asked of lm-eval."""
    examples = "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in shots)
    return f"{DESCRIPTION}{examples}Question: {question}\nAnswer:"


@pytest.fixture(autouse=True, scope="module")
def offline(tmp_path_factory):
    """No hub: Hugging Face offline, its cache in a temporary directory, and the working
    directory the repository's root, which the tasks' data files are relative to."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("HF_DATASETS_OFFLINE", "1")
        patch.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf")))
        patch.chdir(ROOT)
        yield


def config(tmp_path: Path, seed: int = 42, **generator) -> Path:
    path = tmp_path / f"lmeval-{len(list(tmp_path.iterdir()))}.yaml"
    generator = {"type": "lmeval", "include_path": str(TASKS), **generator}
    max_sessions = generator.pop("max_sessions", -1)
    document = {"seed": seed, "session_generator": generator,
                "runtime": {"max_sessions": max_sessions}}  # fmt: skip
    path.write_text(yaml.safe_dump(document))
    return path


def sessions(path: Path) -> dict[str, list]:
    """Each session's payloads, by session id, in the graph's order."""
    graph = synthetic_graph(path)
    return {
        tree.sessions[0].conversation_id: [node.payload for node in tree.nodes]
        for tree in graph.trees
    }


async def profile(path: Path, tmp_path: Path, *flags: str) -> Run:
    async with running_simulator(RECORDING) as sim:
        directory = tmp_path / "artifacts"
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dagperf", "profile", "--session-config", str(path),
            "--url", sim.url, "--artifact-dir", str(directory), "--quiet", *flags,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=os.environ | {"PYTHONUNBUFFERED": "1"}, cwd=ROOT,
        )  # fmt: skip
        run = await finish(process, directory, sim, timeout=120)
    assert run.returncode == 0, run.stderr
    return run


def bodies(run: Run) -> dict[str, list[dict]]:
    """What the simulator received, by session, in send order."""
    found: dict[str, list[dict]] = {}
    for record in sorted(run.records, key=lambda r: r["metadata"]["turn_index"]):
        served = run.served[record["metadata"]["x_request_id"]]
        found.setdefault(record["metadata"]["conversation_id"], []).append(served.body)
    return found


async def test_each_document_is_sent_as_the_task_s_context_with_its_few_shot_examples(tmp_path):
    path = config(tmp_path, tasks=["dagperf_arith"], num_fewshot=2)
    run = await profile(path, tmp_path)
    sent = bodies(run)
    assert sorted(sent) == [f"dagperf_arith:{d}" for d in range(4)]
    for d, question in enumerate(QUESTIONS):
        (body,) = sent[f"dagperf_arith:{d}"]
        assert body["messages"] == [{"role": "user", "content": context(question, SHOTS[:2])}]
        # The task's generation_kwargs: max_gen_toks the limit, until the stop strings, the
        # rest sent as written, as Veeksha sends them.
        assert body["max_tokens"] == 12
        assert body["stop"] == ["\n", "Question:"]
        assert body["do_sample"] is False
        assert "until" not in body and "max_gen_toks" not in body


async def test_a_multiple_choice_document_scores_each_choice_as_veeksha_does(tmp_path):
    # The task fixes num_fewshot at 0, which Veeksha leaves as it is whatever the config asks.
    path = config(tmp_path, tasks=["dagperf_choices"], num_fewshot=2)
    run = await profile(path, tmp_path, "--endpoint-type", "completions")
    scoring = {"max_tokens": 1, "echo": True, "logprobs": 1, "temperature": 0}
    expected = {
        "dagperf_choices:0": ["Which is even? Answer: three", "Which is even? Answer: four"],
        "dagperf_choices:1": [f"Which is a colour? Answer: {c}" for c in ("red", "run", "rust")],
    }
    sent = bodies(run)
    assert {sid: [b["prompt"] for b in found] for sid, found in sent.items()} == expected
    for body in (b for found in sent.values() for b in found):
        assert {key: body[key] for key in scoring} == scoring


def test_documents_are_taken_in_turn_from_each_task_up_to_max_sessions(tmp_path):
    # ceil(3 / 2) documents of each task: the first of each (in lm-eval's order of the tasks),
    # then the second of the first task.
    found = sessions(config(tmp_path, tasks=["dagperf_arith", "dagperf_choices"], max_sessions=3))
    (first, _), (second, _), (third, doc) = (sid.split(":") for sid in found)
    assert {first, second} == {"dagperf_arith", "dagperf_choices"}
    assert (third, doc) == (first, "1")
    for sid, payloads in found.items():
        task, d = sid.split(":")
        if task == "dagperf_arith":  # num_fewshot is Veeksha's default, 1
            assert [p.messages[0]["content"] for p in payloads] == [
                context(QUESTIONS[int(d)], SHOTS[:1])
            ]
        else:  # one request per choice, none waiting for another
            assert len(payloads) == [2, 3][int(d)]
    graph = synthetic_graph(config(tmp_path, tasks=["dagperf_choices"]))
    assert [[n.deps for n in tree.nodes] for tree in graph.trees] == [[(), ()], [(), (), ()]]


@pytest.mark.parametrize("shots", [0, 3])
def test_num_fewshot_is_the_number_of_examples(tmp_path, shots):
    found = sessions(config(tmp_path, tasks=["dagperf_arith"], num_fewshot=shots))
    contents = [payloads[0].messages[0]["content"] for payloads in found.values()]
    assert contents == [context(q, SHOTS[:shots]) for q in QUESTIONS]


def test_the_seed_draws_the_few_shot_examples(tmp_path):
    def drawn(seed: int) -> list[str]:
        path = config(tmp_path, seed, tasks=["dagperf_arith_drawn"], num_fewshot=2)
        return [p[0].messages[0]["content"] for p in sessions(path).values()]

    first = drawn(1)
    assert drawn(1) == first
    assert drawn(2) != first
    for question, content in zip(QUESTIONS, first, strict=True):  # two examples of the train split
        assert content in {context(question, list(two)) for two in permutations(SHOTS, 2)}


def test_include_path_is_read_beside_the_config_too(tmp_path):
    (tmp_path / "tasks").symlink_to(TASKS)
    path = config(tmp_path, tasks=["dagperf_arith"], include_path="tasks", max_sessions=2)
    assert list(sessions(path)) == ["dagperf_arith:0", "dagperf_arith:1"]


@pytest.mark.parametrize(
    ("tasks", "said"),
    [
        (["dagperf_arith", "no_such_task", "nor_this"],
         ["session_generator.tasks: unknown task 'no_such_task' (not among lm-eval's tasks and "
          "the include_path)",
          "session_generator.tasks: unknown task 'nor_this' (not among lm-eval's tasks and the "
          "include_path)"]),
        (["dagperf_rolling"],
         ["session_generator.tasks: 'dagperf_rolling' makes loglikelihood_rolling requests; "
          "dagperf sends generate_until and loglikelihood, as Veeksha does"]),
    ],
)  # fmt: skip
def test_tasks_dagperf_cannot_send_are_named(tmp_path, tasks, said):
    with pytest.raises(DatasetError) as caught:
        synthetic_graph(config(tmp_path, tasks=tasks))
    assert [p.message for p in caught.value.problems] == said


def test_a_task_whose_data_cannot_be_read_is_named_with_the_reason(tmp_path):
    # lm-eval's own hellaswag: known to its index, its data on the hub, which is offline here.
    path = tmp_path / "hub.yaml"
    path.write_text(
        yaml.safe_dump({"session_generator": {"type": "lmeval", "tasks": ["hellaswag"]}})
    )
    with pytest.raises(DatasetError) as caught:
        synthetic_graph(path)
    (problem,) = caught.value.problems
    assert problem.message.startswith("session_generator.tasks: cannot load hellaswag: ")
    assert "hellaswag" in problem.message.split(": ", 2)[2]  # the reason, from datasets


def test_the_example_loads():
    graph = synthetic_graph(ROOT / "examples" / "veeksha" / "lmeval.yaml")
    assert graph.root_count == 4 and graph.request_count == 4
