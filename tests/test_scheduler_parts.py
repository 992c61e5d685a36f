"""The scheduler's pure parts, without sockets: who is registered (roster) and what the
dispatcher's decisions become on the wire (outbox)."""

from __future__ import annotations

import msgspec

from dagperf.apis.endpoint_config import EndpointConfig
from dagperf.engine import Dispatcher
from dagperf.graph import compile_dag_jsonl
from dagperf.scheduler.outbox import Outbox
from dagperf.scheduler.roster import Greeting, Roster
from dagperf.transport import protocol
from dagperf.vocabulary.config import LoadConfig

from dagfile import conv, load, turn

URL = "http://127.0.0.1:8000"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def hello(incarnation: str, url: str = URL) -> protocol.Hello:
    return protocol.Hello("w", incarnation, 1, url)


def test_the_roster_tells_new_known_restarted_and_refused_workers_apart():
    roster = Roster(URL, Clock())
    assert roster.greet("w", hello("a")) is Greeting.NEW
    roster.add("w", "a")
    assert roster.greet("w", hello("a")) is Greeting.KNOWN
    assert roster.greet("w", hello("b")) is Greeting.RESTARTED
    assert roster.greet("w", hello("a", url="http://127.0.0.1:9")) is Greeting.REFUSED
    assert list(roster) == ["w"] and "w" in roster and len(roster) == 1


def test_the_roster_finds_the_silent_and_ignores_a_dead_incarnations_heartbeat():
    clock = Clock()
    roster = Roster(URL, clock)
    roster.add("w1", "a")
    roster.add("w2", "b")
    clock.now += 8
    roster.beat(protocol.Heartbeat("w1", "a"))
    roster.beat(protocol.Heartbeat("w2", "old"))  # a process that was replaced
    assert roster.heard("stranger") is False
    clock.now += 3
    assert roster.silent(10.0) == [("w2", 11.0)]
    assert roster.heard("w2") is True
    assert roster.silent(10.0) == []
    roster.remove("w2")
    assert list(roster) == ["w1"]


def graph():
    """A root of one turn and a FORK child after it: the child goes out armed."""
    return compile_dag_jsonl(load(conv("root", turn(forks=["kid"])), conv("kid", turn())))


def test_the_outbox_batches_credits_with_armed_children_and_records_when_each_was_issued():
    endpoint = EndpointConfig(url=URL, model="m")
    d = Dispatcher(graph(), LoadConfig(concurrency=1), Clock(), new_id=iter("abcdef").__next__)
    d.add_worker("w")
    d.begin()
    outbox = Outbox(endpoint)
    mail = outbox.collect(d, 123, present={"w"})
    assert [worker for worker, _ in mail.items] == ["w"] and not mail.cancelled
    message = msgspec.msgpack.decode(mail.items[0][1][1], type=protocol.Credits)
    (credit,) = message.items
    (child,) = credit.then
    assert (credit.history, child.after, child.history) == (-1, credit.id, credit.node)
    payload = d.in_flight()[0].run.tree.nodes[0].payload
    assert credit.params == {"model": "m", "stream": False}
    assert outbox.params(payload) is outbox.params(payload)
    assert outbox.issued(child.id, 0) == 123 and outbox.settle(credit.id) == 123
    assert outbox.settle(credit.id) == 0  # settled once


def test_the_outbox_keeps_a_bounded_number_of_parameter_sets(monkeypatch):
    """Parameters are built once per payload while few are in use, and the cache is emptied
    past its bound: a long run over a large dataset does not keep one set per turn."""
    from dagperf.graph import Payload
    from dagperf.scheduler import outbox as outbox_module

    monkeypatch.setattr(outbox_module, "PARAMS_KEPT", 3)
    outbox = Outbox(EndpointConfig(url=URL, model="m"))
    payloads = [
        Payload.of([{"role": "user", "content": str(i)}], max_tokens=i + 1) for i in range(4)
    ]
    first = outbox.params(payloads[0])
    assert outbox.params(payloads[0]) is first  # built once
    for payload in payloads[1:]:
        outbox.params(payload)  # the fourth empties the cache first
    again = outbox.params(payloads[0])
    assert again is not first and again == first == {"model": "m", "stream": False, "max_tokens": 1}
