"""The wire-level pieces: SSE framing, reply decoding, the ZeroMQ protocol, routing."""

from __future__ import annotations

import asyncio
import collections

import msgspec
import pytest
import zmq
import zmq.asyncio
from hypothesis import given
from hypothesis import strategies as st

from dagperf.apis.choices import ChoicesReply
from dagperf.apis.conversation import captured_reply, prompt_text
from dagperf.apis.reply import MalformedResponse, ServerError
from dagperf.engine.routing import RendezvousRouter
from dagperf.transport import protocol
from dagperf.transport.channel import Channel
from dagperf.transport.sse import Event, SSEParser

STREAM = (
    b": keep-alive\n\n"
    b'data: {"choices":[{"delta":{"role":"assistant","content":"Hel"}}]}\n\n'
    b"event: message\r\n"
    b'data: {"choices":[{"delta":{"content":"lo"}}]}\r\n\r\n'
    b"data: line one\ndata: line two\n\n"
    b"data: [DONE]\n\n"
)


def test_sse_events_whatever_the_chunking():
    whole = SSEParser().feed(STREAM)
    assert whole == [
        Event(b'{"choices":[{"delta":{"role":"assistant","content":"Hel"}}]}', b""),
        Event(b'{"choices":[{"delta":{"content":"lo"}}]}', b"message"),
        Event(b"line one\nline two", b""),
        Event(b"[DONE]", b""),
    ]
    for size in (1, 2, 3, 7, 50):
        parser = SSEParser()
        events = [e for i in range(0, len(STREAM), size) for e in parser.feed(STREAM[i : i + size])]
        assert events == whole, size


@given(st.lists(st.integers(1, 40), max_size=30))
def test_sse_chunk_boundaries_never_change_the_events(cuts):
    parser, events, position = SSEParser(), [], 0
    for cut in cuts:
        events += parser.feed(STREAM[position : position + cut])
        position += cut
    events += parser.feed(STREAM[position:])
    events += parser.close()
    assert events == SSEParser().feed(STREAM)


_SSE_PIECES = st.sampled_from(
    [b'data: {"a":1}\n\n', b"data:x\n\n", b"data: [DONE]\n\n", b"data: one\ndata: two\n\n",
     b": keep-alive\n\n", b"event: error\n", b"\n", b"\r\n", b"data: y\r\n\r\n", b"retry: 5\n",
     b"data: \n\n", b"data: z"]
)  # fmt: skip


@given(st.lists(_SSE_PIECES, max_size=40), st.lists(st.integers(1, 200), max_size=10))
def test_sse_whole_runs_of_data_events_read_as_line_by_line(pieces, cuts):
    """A chunk of whole one-line `data:` events is cut at its blank lines, not read line by
    line: the same events, whatever else the stream holds and however it is cut."""
    stream = b"".join(pieces)
    one_byte = SSEParser()  # a byte at a time: never a blank line within one read
    expected = [e for i in range(len(stream)) for e in one_byte.feed(stream[i : i + 1])]
    expected += one_byte.close()
    parser, events, position = SSEParser(), [], 0
    for cut in cuts:
        events += parser.feed(stream[position : position + cut])
        position += cut
    events += parser.feed(stream[position:]) + parser.close()
    assert events == expected


def test_sse_lone_cr_line_endings_and_an_unterminated_last_event():
    parser = SSEParser()
    assert parser.feed(b"data: a\r\rdata: b") == [Event(b"a", b"")]
    assert parser.close() == [Event(b"b", b"")]


def test_reply_from_stream_chunks_with_reasoning_tool_calls_and_usage():
    reply = ChoicesReply()
    chunks = [
        b'{"choices":[{"delta":{"reasoning_content":"think "}}]}',
        b'{"choices":[{"delta":{"reasoning":"more"}}]}',
        b'{"choices":[{"delta":{"content":"Hi"}}]}',
        b'{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function",'
        b'"function":{"name":"get","arguments":"{\\"a\\""}}]}}]}',
        b'{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":": 1}"}}]}}]}',
        b'{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}',
        b'{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":5,'
        b'"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}}',
    ]
    carried = [reply.add_chunk(c) for c in chunks]
    assert carried == [True, True, True, True, True, False, False]
    assert reply.message() == {
        "role": "assistant",
        "content": "Hi",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"a": 1}'}}
        ],
    }
    assert reply.usage_counts() == {
        "usage_prompt_tokens": 9,
        "usage_completion_tokens": 5,
        "usage_prompt_cache_read_tokens": 4,
        "usage_reasoning_tokens": 2,
    }


def test_reply_from_a_whole_body():
    reply = ChoicesReply()
    reply.add_body(
        b'{"choices":[{"message":{"role":"assistant","content":"","reasoning_content":"why"}}]}'
    )
    assert reply.message() == {"role": "assistant", "content": "why"}  # reasoning stands in
    completion = ChoicesReply()
    completion.add_body(b'{"choices":[{"text":"done"}],"usage":{"completion_tokens":1}}')
    assert completion.text == "done" and completion.usage_counts() == {"usage_completion_tokens": 1}


@pytest.mark.parametrize(
    ("raw", "code", "kind", "message"),
    [
        (
            b'{"error":{"message":"slow down","type":"rate_limit","code":429}}',
            429,
            "rate_limit",
            "slow down",
        ),
        (
            b'{"object":"error","message":"bad","type":"BadRequestError","code":400}',
            400,
            "BadRequestError",
            "bad",
        ),
        (b'{"error":"plain"}', None, "ServerError", "plain"),
    ],
)
def test_server_errors_in_either_shape(raw, code, kind, message):
    with pytest.raises(ServerError) as caught:
        ChoicesReply().add_chunk(raw)
    assert (caught.value.code, caught.value.kind, str(caught.value)) == (code, kind, message)


@pytest.mark.parametrize(
    "raw", [b"{not json", b"[1,2]", b'{"choices": 5}', b'{"choices":[{"delta":{"content":3}}]}']
)
def test_malformed_chunks(raw):
    with pytest.raises(MalformedResponse):
        ChoicesReply().add_chunk(raw)


def test_captured_reply_rules():
    assert captured_reply("answer", "thoughts", None) == {"role": "assistant", "content": "answer"}
    assert captured_reply("", "thoughts", None) == {"role": "assistant", "content": "thoughts"}
    call = [{"id": "x", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    assert captured_reply("", "thoughts", call) == {
        "role": "assistant",
        "content": None,
        "tool_calls": call,
    }
    assert (
        prompt_text(
            [
                {"role": "user", "content": [{"type": "text", "text": "a"}]},
                {"role": "assistant", "content": "b"},
            ]
        )
        == "a\nb"
    )


def test_protocol_round_trip_and_refusals():
    armed = protocol.Credit(2, 2, 4, 3, 0, b"[]", {"model": "m"}, "r2", "c", "k")
    credit = protocol.Credit(
        1, 2, 3, -1, 1, b'[{"role":"user","content":"x"}]', {"model": "m"}, "r", "c", "k", (armed,)
    )
    for message in (
        protocol.Credits([credit]),
        protocol.Results([protocol.Result(1, 10, 11, 12, {"x": 1.0}, started=(2,))]),
        protocol.Disarm([2]),
    ):
        assert protocol.decode(protocol.encode(message)) == message
    with pytest.raises(protocol.BadMessage, match="unsupported protocol"):
        protocol.decode([b"dagperf/99", msgspec.msgpack.encode({"type": "credits"})])
    with pytest.raises(protocol.BadMessage):
        protocol.decode([protocol.VERSION, b"\xc1garbage"])
    with pytest.raises(protocol.BadMessage):
        protocol.decode([protocol.VERSION, msgspec.msgpack.encode({"type": "launch-missiles"})])
    with pytest.raises(protocol.BadMessage, match="expected 2 frames"):
        protocol.decode([protocol.VERSION])


async def test_a_channel_goes_on_after_a_message_it_failed_to_handle(caplog):
    context = zmq.asyncio.Context.instance()
    address = f"inproc://channel-{id(context)}"
    router, dealer = context.socket(zmq.ROUTER), context.socket(zmq.DEALER)
    router.bind(address)
    dealer.connect(address)
    handled, done = [], asyncio.Event()

    def on_message(frames: list[bytes]) -> None:
        if frames[1] == b"bad":
            raise ValueError("a bug")
        handled.append(frames[1])
        done.set()

    channel = Channel(zmq.Socket.shadow(router.underlying), on_message)
    await dealer.send(b"bad")
    await dealer.send(b"good")
    await asyncio.wait_for(done.wait(), 60)
    assert handled == [b"good"]
    (logged,) = [r for r in caplog.records if r.name == "dagperf.transport.channel"]
    assert logged.exc_info[0] is ValueError  # said where, not left to the event loop
    channel.close()
    dealer.close(linger=0)


def test_rendezvous_routing_is_stable_and_moves_only_what_it_must():
    router = RendezvousRouter()
    for w in ("w1", "w2", "w3", "w4"):
        router.add(w)
    keys = [f"key-{i}" for i in range(2000)]
    before = {k: router.pick(k) for k in keys}
    share = collections.Counter(before.values())
    assert all(350 < n < 650 for n in share.values())  # about a quarter each
    assert before == {k: router.pick(k) for k in keys}  # deterministic
    router.remove("w2")
    after = {k: router.pick(k) for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert moved and all(before[k] == "w2" for k in moved)  # only w2's keys moved
    router.add("w5")
    grown = {k: router.pick(k) for k in keys}
    assert all(grown[k] in (after[k], "w5") for k in keys)  # a new worker only takes keys
    with pytest.raises(LookupError):
        RendezvousRouter().pick("k")


def test_a_new_key_costs_the_same_however_many_workers_there_are(monkeypatch):
    """Once a bucket's winner is known, a key in it scores no worker; a change of workers
    finds the winners again."""
    from dagperf.engine import routing

    router = RendezvousRouter()
    for w in range(256):
        router.add(f"w{w}")
    keys = [f"key-{i}" for i in range(20_000)]
    first = {k: router.pick(k) for k in keys}
    assert len(set(first.values())) == 256
    scored = []
    real_scores = routing._scores
    monkeypatch.setattr(routing, "_scores", lambda b, w: scored.append(b) or real_scores(b, w))
    assert {k: router.pick(k) for k in keys} == first and scored == []
    router.remove("w0")
    assert {k: router.pick(k) for k in keys if first[k] != "w0"} == {
        k: w for k, w in first.items() if w != "w0"
    }


def test_batches_keep_order_and_stay_under_the_size_limit():
    """A peer drops a message over its MAXMSGSIZE along with the connection: batches are split
    by count and by size, in order; one item too big for the limit still goes alone."""
    results = [protocol.Result(i, 1, 2, 3, {"itl": [0.5] * (i % 50)}) for i in range(5000)]
    messages = [
        protocol.decode(frames)
        for frames in protocol.encode_batches(protocol.Results, results, 20_000)
    ]
    assert [r.credit for m in messages for r in m.items] == list(range(5000))
    assert all(len(m.items) <= protocol.BATCH for m in messages)
    assert all(len(protocol.encode(m)[1]) <= 20_000 for m in messages)
    huge = [protocol.Result(0, 1, 2, 3, {"itl": [0.5] * 10_000})]
    (alone,) = protocol.encode_batches(protocol.Results, huge, 20_000)
    assert protocol.decode(alone) == protocol.Results(huge)
