"""FORK-tree locality: did the sessions that share a history stay on the backend that holds it?

A FORK tree is a root or SPAWNed session with the FORK children that continue its history
(sessions with one route). Its requests all carry one affinity key, so a KV-aware router should
send them to one backend: the tree's home, the backend of its first request. For every tree
this counts the backends that served it and the requests served away from home; the speed of
every later request (TTFT when streamed, else latency) is kept apart for home and away, which
shows what a broken affinity costs. A backend is named by the results (see `--backend-header`);
requests that name none are left out.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple

from dagperf.engine import Flight, TreeRun
from dagperf.metrics.per_run import PerRun
from dagperf.metrics.summary import Distribution
from dagperf.transport.protocol import Result


class _Served(NamedTuple):
    route: int
    start_ns: int
    backend: str
    speed_ms: float | None


class Locality:
    def __init__(self) -> None:
        self._runs: PerRun[_Served] = PerRun(self._close)
        self.trees = 0
        self.trees_on_one = 0
        self.off_home = 0
        self.by_backend: Counter[str] = Counter()
        self.sources: Counter[str] = Counter()
        self.home = Distribution()
        self.away = Distribution()

    def add(self, flight: Flight, result: Result) -> None:
        if result.backend is None or result.error is not None:
            return
        tree = flight.run.tree
        route = tree.sessions[tree.nodes[flight.node].session].route
        metrics = result.metrics
        speed = metrics.get("time_to_first_token", metrics.get("request_latency"))
        self.sources[result.backend_source or "unknown"] += 1
        self._runs.add(flight.run, _Served(route, result.start_ns, result.backend, speed))

    def retire(self, run: TreeRun) -> None:
        self._runs.retire(run)

    def finish(self) -> None:
        self._runs.finish()

    def _close(self, run: TreeRun, served: list[_Served], retired: bool) -> None:
        trees: dict[int, list[_Served]] = {}
        for s in served:
            trees.setdefault(s.route, []).append(s)
        for requests in trees.values():
            requests.sort(key=lambda s: s.start_ns)
            home = requests[0].backend
            self.trees += 1
            self.trees_on_one += len({s.backend for s in requests}) == 1
            for s in requests:
                self.by_backend[s.backend] += 1
            for s in requests[1:]:
                at_home = s.backend == home
                self.off_home += not at_home
                if s.speed_ms is not None:
                    (self.home if at_home else self.away).add(s.speed_ms)

    def report(self) -> dict[str, Any] | None:
        """`backend_locality` for the summary; None when no result named its backend."""
        if not self.trees:
            return None
        out: dict[str, Any] = {
            "method": ", ".join(sorted(self.sources)),
            "trees": self.trees,
            "trees_on_one_backend": self.trees_on_one,
            "requests_off_home_backend": self.off_home,
            "by_backend": dict(sorted(self.by_backend.items())),
        }
        for name, d in (("home_backend_ms", self.home), ("off_home_backend_ms", self.away)):
            if d.count:
                p50, p99 = d.percentiles((50, 99))
                out[name] = {"count": d.count, "avg": d.sum / d.count, "p50": p50, "p99": p99}
        return out
