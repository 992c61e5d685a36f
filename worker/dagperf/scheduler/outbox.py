"""What the dispatcher decided, as messages: Credits, Cancels, Disarms and Forgets, one batch of
each kind per worker, in that order.

The outbox also remembers when each credit was issued (a lost or abandoned request's record
starts there) and each payload's request parameters, which are the same for every run of a tree.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from typing import Any

from dagperf.apis import APIS
from dagperf.apis.endpoint_config import EndpointConfig
from dagperf.engine import Dispatcher, Flight, TreeRun, armed_under
from dagperf.graph import Payload
from dagperf.transport import protocol

Frames = list[bytes]
PARAMS_KEPT = 65_536


@dataclass
class Mail:
    """Messages to send, each as (worker, frames); `cancelled` when any were Cancels."""

    items: list[tuple[str, Frames]] = field(default_factory=list)
    cancelled: bool = False
    retired: list[TreeRun] = field(default_factory=list)  # tree runs that ended

    def add(self, worker: str, message: protocol.Message) -> None:
        self.items.append((worker, protocol.encode(message)))


class Outbox:
    def __init__(self, endpoint: EndpointConfig):
        self._endpoint = endpoint
        self._api = APIS[endpoint.endpoint_type]
        self._params: dict[tuple[Any, ...], tuple[Any, Any, dict[str, Any]]] = {}
        self._issued: dict[int, int] = {}

    def collect(self, dispatcher: Dispatcher, now_ns: int, present: Container[str]) -> Mail:
        """Drain the dispatcher's decisions into mail; Forgets only go to workers `present`
        (a lost worker's histories are gone anyway)."""
        mail = Mail()
        credits: dict[str, list[protocol.Credit]] = {}
        for flight in dispatcher.orders.drain_sends():
            self._issued[flight.credit] = now_ns
            for armed in armed_under(flight):  # issued now, started by the worker later
                self._issued[armed.credit] = now_ns
            credits.setdefault(flight.worker, []).append(self._credit(flight))
        for worker, batch in credits.items():
            for frames in protocol.encode_batches(protocol.Credits, batch, protocol.MAX_TO_WORKER):
                mail.items.append((worker, frames))
        cancels = _by_worker((f.worker, f.credit) for f in dispatcher.drain_cancels())
        for worker, ids in cancels.items():
            mail.add(worker, protocol.Cancel(ids))
        mail.cancelled = bool(cancels)
        disarms = _by_worker((f.worker, f.credit) for f in dispatcher.orders.drain_disarms())
        for worker, ids in disarms.items():
            mail.add(worker, protocol.Disarm(ids))
        mail.retired = dispatcher.orders.drain_retired()
        # A run none of whose nodes left a context on a worker (single turns) has nothing to
        # forget there: no message for it, which halves the messages of a run of them.
        held = (run for run in mail.retired if run.template.keeps_history)
        forgets = _by_worker((w, run.id) for run in held for w in run.workers)
        for worker, runs in forgets.items():
            if worker in present:
                mail.add(worker, protocol.Forget(runs))
        return mail

    def issued(self, credit: int, otherwise: int) -> int:
        """When the credit went out (`otherwise` if it never did); the outbox keeps it."""
        return self._issued.get(credit, otherwise)

    def unanswered(
        self, credit: int, error: protocol.ErrorInfo, now_ns: int, cancelled: bool = False
    ) -> protocol.Result:
        """The record of a request whose answer will never come (its worker was lost, or did
        not answer a cancel): cut at `now_ns`, with what it saw lost; `cancelled` at `now_ns`."""
        issued = self.issued(credit, now_ns)
        cut = protocol.Cut((now_ns - issued) / 1e6, None)
        cancelled_ns = now_ns if cancelled else None
        return protocol.Result(credit, issued, None, now_ns, {}, error, cancelled_ns, cut=cut)

    def settle(self, credit: int) -> int:
        """When the credit went out (0 if unknown), forgetting it: its result is in."""
        return self._issued.pop(credit, 0)

    def params(self, payload: Payload) -> dict[str, Any]:
        """The request parameters for a payload, built once for each combination of the fields
        they come from. The model, cap and flag are compared by value, `tools` and `extra` by
        identity, and the entry holds those two objects, so an id cannot name another object
        while it is kept (trees built when read are let go, and a new payload may reuse a freed
        id). The cache is emptied when it grows past `PARAMS_KEPT`, so a large dataset's run
        does not end up holding a set of parameters per turn of the file."""
        key = (
            payload.model,
            payload.max_tokens,
            id(payload.tools),
            id(payload.extra),
            payload.verbatim,
        )
        kept = self._params.get(key)
        if kept is None:
            if len(self._params) >= PARAMS_KEPT:
                self._params.clear()
            params = self._api.params(payload, self._endpoint)
            kept = self._params[key] = (payload.tools, payload.extra, params)
        return kept[2]

    def _credit(self, flight: Flight) -> protocol.Credit:
        """The credit for a flight, carrying its armed flights flat (see `protocol.Credit`)."""
        after = {id(a): f.credit for f in (flight, *armed_under(flight)) for a in f.armed}
        then = tuple(self._one_credit(a, after[id(a)]) for a in armed_under(flight))
        return self._one_credit(flight, -1, then)

    def _one_credit(
        self, flight: Flight, after: int, then: tuple[protocol.Credit, ...] = ()
    ) -> protocol.Credit:
        run = flight.run
        node = run.tree.nodes[flight.node]
        session = run.tree.sessions[node.session]
        correlation, route = run.correlation[node.session], run.correlation[session.route]
        assert correlation is not None and route is not None  # named when first dispatched
        return protocol.Credit(
            flight.credit,
            run.id,
            flight.node,
            -1 if node.history is None else node.history,
            run.template.keep[flight.node],
            node.payload.wire_messages(),
            self.params(node.payload),
            flight.request_id,
            correlation,
            route,
            then,
            node.keep_reply,
            after,
        )


def _by_worker(pairs: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for worker, item in pairs:
        out.setdefault(worker, []).append(item)
    return out
