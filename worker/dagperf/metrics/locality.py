"""FORK-tree locality: did the sessions that share a history stay on the backend that holds it?

A FORK tree is a root or SPAWNed session with the FORK children that continue its history
(sessions with one route). Its requests all carry one affinity key, so a KV-aware router should
send them to one backend: the tree's home, the backend of its first request. For every tree
this counts the backends that served it and the requests served away from home; the speed of
every later request (TTFT when streamed, else latency) is kept apart for home and away, which
shows what a broken affinity costs. A tree with one successful request has nothing to stay
with: it is not counted (else a run of single requests would read as trees kept on one
backend, or ask for a backend header it has no use for).

Only a response can say which backend served it (a header named by `--backend-header`). The
address that answered is no such proof: behind a router it is the router's, so every tree would
seem to stay home. A tree with a request no header attributes is not judged; when none is
attributed, locality is unknown, never claimed, and the addresses are only counted.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple

from dagperf.engine import Flight, TreeRun
from dagperf.metrics.per_run import PerRun
from dagperf.metrics.summary import Distribution
from dagperf.transport.protocol import Result
from dagperf.vocabulary import catalog

UNKNOWN_REASON = (
    "no response named the backend that served it: give --backend-header NAME (a response "
    "header your router or engine adds naming the pod), or scrape each backend with "
    "--server-metrics-url to see its own cache figures"
)


class _Served(NamedTuple):
    route: int
    start_ns: int
    backend: str | None  # None: no response header said
    speed_ms: float | None
    failed: bool  # a failed request: it counts towards its run's end, not its locality


class Locality:
    def __init__(self) -> None:
        self._runs: PerRun[_Served] = PerRun(self._close)
        self.trees = 0
        self.unattributed = 0  # trees with a request no header attributed: not judged
        self.trees_on_one = 0
        self.off_home = 0
        self.by_backend: Counter[str] = Counter()
        self.by_address: Counter[str] = Counter()
        self.sources: Counter[str] = Counter()
        self.home = Distribution()
        self.away = Distribution()

    def add(self, flight: Flight, result: Result) -> None:
        tree = flight.run.tree
        if len(tree.nodes) == 1:  # a lone request: no tree to judge
            return
        route = tree.sessions[tree.nodes[flight.node].session].route
        if result.error is not None:  # held all the same: its run closes once every node is in
            self._runs.add(flight.run, _Served(route, result.start_ns, None, None, True))
            return
        backend = result.backend
        source = result.backend_source or ""
        if not source.startswith("header:"):
            if backend is not None:
                self.by_address[backend] += 1
            backend = None
        else:
            self.sources[source] += 1
        metrics = result.metrics
        speed = metrics.get(catalog.TIME_TO_FIRST_TOKEN.name)
        if speed is None:
            speed = metrics.get(catalog.REQUEST_LATENCY.name)
        self._runs.add(flight.run, _Served(route, result.start_ns, backend, speed, False))

    def retire(self, run: TreeRun) -> None:
        if len(run.tree.nodes) > 1:  # (a one-request run is not held)
            self._runs.retire(run)

    def finish(self) -> None:
        self._runs.finish()

    def _close(self, run: TreeRun, served: list[_Served], retired: bool) -> None:
        trees: dict[int, list[_Served]] = {}
        for s in served:
            if not s.failed:
                trees.setdefault(s.route, []).append(s)
        for requests in trees.values():
            if len(requests) < 2:  # (a one-turn SPAWN child, or a tree all but one failed)
                continue
            self.trees += 1
            requests.sort(key=lambda s: s.start_ns)
            home = requests[0].backend
            backends = {s.backend for s in requests}
            if home is None or None in backends:
                self.unattributed += 1
                continue
            self.trees_on_one += len(backends) == 1
            self.by_backend.update(s.backend for s in requests if s.backend is not None)
            for s in requests[1:]:
                at_home = s.backend == home
                self.off_home += not at_home
                if s.speed_ms is not None:
                    (self.home if at_home else self.away).add(s.speed_ms)

    def report(self) -> dict[str, Any] | None:
        """`backend_locality` for the summary; None when no request succeeded."""
        if not self.trees:
            return None
        judged = self.trees - self.unattributed
        if not judged:
            return {
                "method": "unknown",
                "trees": self.trees,
                "trees_on_one_backend": None,
                "requests_off_home_backend": None,
                "reason": UNKNOWN_REASON,
                "by_address": dict(sorted(self.by_address.items())),
            }
        out: dict[str, Any] = {
            "method": ", ".join(sorted(self.sources)),
            "trees": judged,
            "trees_on_one_backend": self.trees_on_one,
            "requests_off_home_backend": self.off_home,
            "by_backend": dict(sorted(self.by_backend.items())),
        }
        if self.unattributed:
            out["trees_unattributed"] = self.unattributed
        for name, d in (("home_backend_ms", self.home), ("off_home_backend_ms", self.away)):
            if d.count:
                p50, p99 = d.percentiles((50, 99))
                out[name] = {"count": d.count, "avg": d.sum / d.count, "p50": p50, "p99": p99}
        return out
