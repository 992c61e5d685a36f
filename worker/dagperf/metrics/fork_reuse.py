"""FORK-child prefix reuse: of the prompt a FORK child sends, how much did the server find cached?

A FORK child's first request carries its parent's whole context (the parent's reply included)
and then its own message, so on a server with a prefix cache, behind a router that kept the
tree on one backend, nearly all of its prompt should be read from the cache. For those requests
this adds up the prompt tokens and the cached ones the server reported
(`usage.prompt_tokens_details.cached_tokens`, or llama.cpp's `timings.cache_n`): for the run,
and per FORK tree (a root or SPAWNed session with the children that continue its history), as a
distribution over trees, so a few scattered trees show beside a good total. A reply that
reports no cached count is counted apart (`unreported`); a share is never guessed.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from dagperf.engine import Flight, TreeRun
from dagperf.graph import SessionKind
from dagperf.metrics.per_run import PerRun
from dagperf.metrics.summary import Distribution
from dagperf.transport.protocol import Result
from dagperf.vocabulary import catalog


class _Sent(NamedTuple):
    route: int
    prompt: int | None  # None: not a FORK child's first request, or nothing reported
    cached: int | None


_OTHER = _Sent(-1, None, None)


class ForkReuse:
    def __init__(self) -> None:
        self._runs: PerRun[_Sent] = PerRun(self._close)
        self.requests = 0
        self.unreported = 0
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.per_tree = Distribution()

    def add(self, flight: Flight, result: Result) -> None:
        tree = flight.run.tree
        if len(tree.nodes) == 1:
            return  # a lone root: no FORK child, nothing to hold
        node = tree.nodes[flight.node]
        session = tree.sessions[node.session]
        if result.error is not None or session.kind is not SessionKind.FORK or node.turn != 0:
            self._runs.add(flight.run, _OTHER)  # every result counts towards its run's end
            return
        self.requests += 1
        prompt = result.metrics.get(catalog.USAGE_PROMPT_TOKENS.name)
        cached = result.metrics.get(catalog.USAGE_PROMPT_CACHE_READ_TOKENS.name)
        if prompt is None or cached is None:
            self.unreported += 1
            self._runs.add(flight.run, _OTHER)
            return
        self.prompt_tokens += int(prompt)
        self.cached_tokens += int(cached)
        self._runs.add(flight.run, _Sent(session.route, int(prompt), int(cached)))

    def retire(self, run: TreeRun) -> None:
        if len(run.tree.nodes) > 1:  # (a lone root was never held)
            self._runs.retire(run)

    def finish(self) -> None:
        self._runs.finish()

    def _close(self, run: TreeRun, sent: list[_Sent], retired: bool) -> None:
        trees: dict[int, list[int]] = {}
        for item in sent:
            if item.prompt is not None and item.cached is not None:
                totals = trees.setdefault(item.route, [0, 0])
                totals[0] += item.prompt
                totals[1] += item.cached
        for prompt, cached in trees.values():
            if prompt:
                self.per_tree.add(cached / prompt)

    def report(self) -> dict[str, Any] | None:
        """`fork_reuse` for the summary; None when the run sent no FORK child."""
        if not self.requests:
            return None
        out: dict[str, Any] = {
            "requests": self.requests,
            "unreported": self.unreported,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "share": self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None,
        }
        per_tree = self.per_tree
        if per_tree.count:
            (p50,) = per_tree.percentiles((50,))
            out["per_tree"] = {
                "trees": per_tree.count,
                "min": per_tree.min,
                "p50": p50,
                "avg": per_tree.sum / per_tree.count,
            }
        return out
