"""Synthetic sessions from a `SessionConfig`: shapes from `graphs`, prompts and think times here.

Every kind of draw has its own random stream, seeded from the config's seed and the stream's
name (a string seed is hashed with SHA-512, the same in every process): the shapes, the think
times, the input lengths, the output lengths and the prompt text. So the same config gives the
same sessions, text included; changing one generator leaves the other draws as they were; and
the first N sessions do not depend on how many are asked for.

A node's prompt is one user message of exactly the drawn input length in the simulator's tokens.
A root's prompt opens with the first round(shared_prefix_ratio * length) tokens of one passage
shared by the whole run, then text of its own; every other prompt is all its own. Own text opens
with a random key (`fresh_passage`), so two prompts share exactly their shared prefix and no more,
which is what a prefix-cache test wants to count. The history a node continues is sent on top of
its prompt, by the worker.
"""

from __future__ import annotations

import random

from dagperf.dataset.prompts import fresh_passage, keyed_passage
from dagperf.dataset.specs import GraphNode, Payload, SessionSpec
from dagperf.synthetic.config import PromptConfig, SessionConfig, SingleRequestGraph
from dagperf.synthetic.distributions import count_sampler, duration_sampler
from dagperf.synthetic.graphs import shape_sampler


def generate_sessions(config: SessionConfig) -> list[SessionSpec]:
    """`config.num_sessions` sessions, ids `syn-000001` on, each compiling with
    `compile_sessions`; the same config (seed included) gives the same list."""
    graph = config.session_graph
    shapes = shape_sampler(graph, _stream(config.seed, "shape"))
    if isinstance(graph, SingleRequestGraph):
        wait = None
    else:
        wait = duration_sampler(graph.request_wait_generator, _stream(config.seed, "wait"))
    prompts = PromptWriter(config.prompt, config.seed)
    sessions = []
    for i in range(config.num_sessions):
        nodes = tuple(
            GraphNode(
                shape.key,
                prompts.payload(root=not shape.parents),
                shape.parents,
                shape.history,
                wait() if wait is not None and shape.parents else 0.0,
            )
            for shape in shapes()
        )
        sessions.append(SessionSpec(f"syn-{i + 1:06d}", nodes, config.context_mode))
    return sessions


class PromptWriter:
    """The payloads of a run, one per call in node order."""

    def __init__(self, prompt: PromptConfig, seed: int):
        self.input_length = count_sampler(prompt.input_length, _stream(seed, "input"))
        self.output_length = count_sampler(prompt.output_length, _stream(seed, "output"))
        self.text = _stream(seed, "text")
        self.prefix_key = _stream(seed, "shared-prefix").getrandbits(63)
        self.ratio = prompt.shared_prefix_ratio
        self.ignore_eos = prompt.ignore_eos

    def payload(self, root: bool) -> Payload:
        tokens = self.input_length()
        shared = round(self.ratio * tokens) if root else 0
        parts = (keyed_passage(self.prefix_key, shared), fresh_passage(tokens - shared, self.text))
        text = " ".join(part for part in parts if part)
        extra = {"ignore_eos": True} if self.ignore_eos else None
        messages = [{"role": "user", "content": text}]
        return Payload.of(messages, max_tokens=self.output_length(), extra=extra)


def _stream(seed: int, name: str) -> random.Random:
    return random.Random(f"dagperf.synthetic:{seed}:{name}")
