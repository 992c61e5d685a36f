"""The shapes of synthetic sessions: which node waits for which, and whose history it continues.

A shape is structure only (keys, parents, history parent), listed parents first; prompts and
think times are attached by `dagperf.synthetic.generate`, from their own random streams, so that
changing a prompt length leaves every shape as it was. A shape sampler is built once per run and
called once per session: its count samplers keep their place (a stair steps on across sessions).

The branching generator guarantees, for every session it draws:

- layers are drawn from `num_layers_generator`; layer 0 has one node if `single_root`, else a
  drawn width; every other layer a drawn width (at least 1 each);
- parents only in earlier layers, so nodes are listed layer by layer, parents first;
- fan-in: each node of layer L >= 1 has at least min(fan_in draw, nodes in layers 0..L-1)
  parents, so the roots are exactly layer 0 (and with `single_root` every node descends from
  the root);
- fan-out: each node of a layer before the last has at least min(fan_out draw, nodes in later
  layers) children, at least one, so only nodes of the last layer are leaves;
- fan_in and fan_out are minimums: the fan-out pass can add parents beyond fan_in, and the
  fan-in pass children beyond fan_out. Parents are distinct;
- skip distance: a node draws a distance d once per pass and takes its new parents from layer
  L - d (d clipped to 1..L), or its new children from layer L + d (clipped to the last layer);
  when that layer has too few nodes left, from the nearer layers, then the farther ones;
- history: with `inherit_history`, exactly one parent of each non-root node, drawn at random,
  is its history parent; roots and, without it, every node start a fresh context.

A session need not be connected when layer 0 has several roots.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import NamedTuple

from dagperf.synthetic.config import BranchingGraph, LinearGraph, SessionGraph, SingleRequestGraph
from dagperf.synthetic.distributions import count_sampler


class Shape(NamedTuple):
    """One node of a session's shape; `parents` index earlier nodes, `history` is one of them."""

    key: str
    parents: tuple[int, ...] = ()
    history: int | None = None


ShapeSampler = Callable[[], list[Shape]]


def shape_sampler(graph: SessionGraph, rng: random.Random) -> ShapeSampler:
    """Draws one session's shape per call, all its randomness from `rng`."""
    if isinstance(graph, SingleRequestGraph):
        return lambda: [Shape("n0")]
    if isinstance(graph, LinearGraph):
        return _linear(graph, rng)
    return _Branching(graph, rng)


def _linear(graph: LinearGraph, rng: random.Random) -> ShapeSampler:
    turns = count_sampler(graph.num_request_generator, rng)
    inherit = graph.inherit_history

    def draw() -> list[Shape]:
        nodes = [Shape("n0")]
        for i in range(1, turns()):
            nodes.append(Shape(f"n{i}", (i - 1,), i - 1 if inherit else None))
        return nodes

    return draw


class _Branching:
    """Layers joined by a fan-in pass, then a fan-out pass (see the module's guarantees)."""

    def __init__(self, graph: BranchingGraph, rng: random.Random):
        self.rng = rng
        self.graph = graph
        self.layer_count = count_sampler(graph.num_layers_generator, rng)
        self.width = count_sampler(graph.layer_width_generator, rng)
        self.fan_in = count_sampler(graph.fan_in_generator, rng)
        self.fan_out = count_sampler(graph.fan_out_generator, rng)
        self.distance = count_sampler(graph.connection_dist_generator, rng)

    def __call__(self) -> list[Shape]:
        count = self.layer_count()
        widths = [1 if self.graph.single_root else self.width()]
        widths += [self.width() for _ in range(1, count)]
        starts = [sum(widths[:layer]) for layer in range(count + 1)]
        layers = [range(starts[layer], starts[layer + 1]) for layer in range(count)]
        parents: list[set[int]] = [set() for _ in range(starts[-1])]
        children: list[set[int]] = [set() for _ in range(starts[-1])]

        for layer in range(1, count):
            for node in layers[layer]:
                want = min(self.fan_in(), starts[layer])
                d = min(self.distance(), layer)
                # The target layer, then the nearer ones, then the farther ones.
                order = [*range(layer - d, layer), *range(layer - d - 1, -1, -1)]
                for parent in self._pick(want, [layers[i] for i in order], set()):
                    parents[node].add(parent)
                    children[parent].add(node)

        last = count - 1
        for layer in range(last):
            for node in layers[layer]:
                want = min(self.fan_out(), starts[-1] - starts[layer + 1])
                d = min(self.distance(), last - layer)
                order = [*range(layer + d, layer, -1), *range(layer + d + 1, count)]
                more = want - len(children[node])
                for child in self._pick(more, [layers[i] for i in order], children[node]):
                    parents[child].add(node)
                    children[node].add(child)

        return [self._shape(layers, node, parents[node]) for node in range(starts[-1])]

    def _pick(self, want: int, groups: Sequence[range], taken: set[int]) -> list[int]:
        """`want` nodes not in `taken`, at random from the first group that has any left, then
        the next; fewer only when the groups run out."""
        chosen: list[int] = []
        for group in groups:
            if len(chosen) >= want:
                break
            free = [n for n in group if n not in taken]
            chosen += self.rng.sample(free, min(want - len(chosen), len(free)))
        return chosen

    def _shape(self, layers: list[range], node: int, parents: set[int]) -> Shape:
        layer = next(i for i, nodes in enumerate(layers) if node in nodes)
        ordered = tuple(sorted(parents))
        history = None
        if ordered and self.graph.inherit_history:
            history = self.rng.choice(ordered)
        return Shape(f"L{layer}.{node - layers[layer].start}", ordered, history)
