"""The DAG report: what the tree's shape did to latency, the reason to run FORK workloads.

Three views of the successful requests of a phase:

- by agent depth (0 for roots, 1 for their children, ...);
- by branch mode (root, fork, spawn);
- FORK sibling groups: the first request of each FORK child of one branch shares the parent's
  whole context, so the first sibling to reach the server pays for the prefix and the others
  should find it cached. For every group, the first sibling (by send time) is compared with
  the rest: time to first token (request latency when not streaming) and the share of prompt
  tokens the server reports as cached.

A sibling group is held only until its last sibling reports, so memory follows what is in
flight; the group's summary then joins the distributions, and the first `MAX_GROUPS_LISTED`
groups are also listed one by one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dagperf.engine import Flight
from dagperf.graph import SessionKind, Tree
from dagperf.metrics.summary import Distribution
from dagperf.transport.protocol import Result
from dagperf.vocabulary import catalog

MAX_GROUPS_LISTED = 100
# What a view calls its figures of each metric: the metric's name with its unit.
TTFT_MS = f"{catalog.TIME_TO_FIRST_TOKEN.name}_ms"
LATENCY_MS = f"{catalog.REQUEST_LATENCY.name}_ms"


@dataclass(slots=True)
class _View:
    """One slice of the requests: how many, how fast, how cached."""

    ttft: Distribution = field(default_factory=Distribution)
    latency: Distribution = field(default_factory=Distribution)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    errors: int = 0  # the endpoint's failures
    cut: int = 0  # cut short by the run itself

    def add(self, metrics: dict[str, Any]) -> None:
        ttft = metrics.get(catalog.TIME_TO_FIRST_TOKEN.name)
        if ttft is not None:
            self.ttft.add(ttft)
        self.latency.add(metrics[catalog.REQUEST_LATENCY.name])
        prompt = metrics.get(catalog.USAGE_PROMPT_TOKENS.name)
        cached = metrics.get(catalog.USAGE_PROMPT_CACHE_READ_TOKENS.name)
        if cached is not None and prompt is not None:
            self.prompt_tokens += prompt
            self.cached_tokens += cached

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {"requests": self.latency.count, "errors": self.errors}
        if self.cut:
            out["cut"] = self.cut
        for name, d in (
            (TTFT_MS, self.ttft),
            (LATENCY_MS, self.latency),
        ):
            if d.count:
                p50, p99 = d.percentiles((50, 99))
                out[name] = {"avg": d.sum / d.count, "p50": p50, "p99": p99}
        if self.prompt_tokens:
            out["cached_token_share"] = self.cached_tokens / self.prompt_tokens
        return out


@dataclass(slots=True)
class _Sibling:
    sent_ns: int
    speed: float  # TTFT, or latency when not streaming, in ms
    cached_share: float | None


class DagReport:
    def __init__(self) -> None:
        self._depths: dict[int, _View] = {}
        self._modes: dict[SessionKind, _View] = {}
        self._open: dict[tuple[int, int | None, str | None], list[_Sibling]] = {}
        self._sizes: dict[int, dict[tuple[int | None, str | None], int]] = {}  # per tree
        self._first = Distribution()
        self._others = Distribution()
        self._first_cached = Distribution()
        self._others_cached = Distribution()
        self._groups = 0
        self._listed: list[dict[str, Any]] = []
        self._metric = catalog.TIME_TO_FIRST_TOKEN.name

    def add(self, flight: Flight, result: Result) -> None:
        tree = flight.run.tree
        node = tree.nodes[flight.node]
        session = tree.sessions[node.session]
        depth = self._depths.get(session.depth)
        if depth is None:  # (not setdefault: a view is four arrays and counters to make)
            depth = self._depths[session.depth] = _View()
        mode = self._modes.get(session.kind)
        if mode is None:
            mode = self._modes[session.kind] = _View()
        if result.error is not None:
            cut = result.cut is not None
            for view in (depth, mode):
                view.cut += cut
                view.errors += not cut
            return
        depth.add(result.metrics)
        mode.add(result.metrics)
        if session.kind is SessionKind.FORK and node.turn == 0:
            self._sibling(flight, tree, session.parent, session.branch_id, result)

    def _sibling(
        self, flight: Flight, tree: Tree, parent: int | None, branch: str | None, result: Result
    ) -> None:
        metrics = result.metrics
        speed = metrics.get(catalog.TIME_TO_FIRST_TOKEN.name)
        if speed is None:
            self._metric = catalog.REQUEST_LATENCY.name
            speed = metrics[catalog.REQUEST_LATENCY.name]
        prompt = metrics.get(catalog.USAGE_PROMPT_TOKENS.name)
        cached = metrics.get(catalog.USAGE_PROMPT_CACHE_READ_TOKENS.name)
        share = cached / prompt if prompt and cached is not None else None
        key = (flight.run.id, parent, branch)  # a FORK branch of one run of one tree
        group = self._open.setdefault(key, [])
        group.append(_Sibling(result.start_ns, speed, share))
        if len(group) >= self._group_size(flight.run.index, tree, parent, branch):
            self._close(key, self._open.pop(key))

    def _group_size(self, index: int, tree: Tree, parent: int | None, branch: str | None) -> int:
        sizes = self._sizes.get(index)
        if sizes is None:
            sizes = self._sizes[index] = {}
            for s in tree.sessions:
                if s.kind is SessionKind.FORK:
                    group = (s.parent, s.branch_id)
                    sizes[group] = sizes.get(group, 0) + 1
        return sizes[(parent, branch)]

    def _close(self, key: tuple[int, int | None, str | None], siblings: list[_Sibling]) -> None:
        if len(siblings) < 2:
            return  # nothing to compare a lone sibling with
        siblings.sort(key=lambda s: s.sent_ns)
        first, others = siblings[0], siblings[1:]
        self._groups += 1
        self._first.add(first.speed)
        for other in others:
            self._others.add(other.speed)
        if first.cached_share is not None:
            self._first_cached.add(first.cached_share)
        for other in others:
            if other.cached_share is not None:
                self._others_cached.add(other.cached_share)
        if len(self._listed) < MAX_GROUPS_LISTED:
            entry: dict[str, Any] = {
                "branch_id": key[2],
                "siblings": len(siblings),
                f"first_{self._metric}_ms": first.speed,
                f"others_{self._metric}_ms": sum(o.speed for o in others) / len(others),
            }
            shares = [o.cached_share for o in others if o.cached_share is not None]
            if first.cached_share is not None and shares:
                entry["first_cached_share"] = first.cached_share
                entry["others_cached_share"] = sum(shares) / len(shares)
            self._listed.append(entry)

    def report(self) -> dict[str, Any]:
        for key in list(self._open):  # groups cut short by a stop: compare what came back
            self._close(key, self._open.pop(key))
        siblings: dict[str, Any] = {"groups": self._groups, "metric": self._metric}
        for name, d in (("first", self._first), ("others", self._others)):
            if d.count:
                p50, p99 = d.percentiles((50, 99))
                siblings[f"{name}_ms"] = {"avg": d.sum / d.count, "p50": p50, "p99": p99}
        for name, d in (("first", self._first_cached), ("others", self._others_cached)):
            if d.count:
                siblings[f"{name}_cached_share"] = d.sum / d.count
        siblings["listed"] = self._listed
        return {
            "by_depth": {str(k): v.report() for k, v in sorted(self._depths.items())},
            "by_branch_mode": {k.value: v.report() for k, v in sorted(self._modes.items())},
            "fork_siblings": siblings,
        }
