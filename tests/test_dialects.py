"""The Responses and Messages APIs read into one reply, from streams shaped as the providers
send them (event sequences, field names and usage blocks as documented by OpenAI and Anthropic)
and from whole bodies."""

from __future__ import annotations

import json

import pytest

from dagperf.apis import APIS
from dagperf.apis.reply import Reply, ServerError
from dagperf.transport.sse import SSEParser


def sse(*events: tuple[str, dict]) -> bytes:
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
    )


def reply_for(api: str) -> Reply:
    return APIS[api].reply()


def read(api: str, stream: bytes):
    """The reply, and which events counted as output (what TTFT and ITL are timed on)."""
    reply = reply_for(api)
    outputs = [reply.add_chunk(e.data) for e in SSEParser().feed(stream)]
    return reply, outputs


RESPONSE = {"id": "resp_1", "object": "response", "status": "in_progress", "output": [],
            "usage": None, "error": None, "model": "gpt-4.1"}  # fmt: skip
TEXT_PART = {"type": "output_text", "text": "Hi there", "annotations": []}
MESSAGE_ITEM = {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
                "content": [TEXT_PART]}  # fmt: skip
RESPONSES_USAGE = {"input_tokens": 37, "input_tokens_details": {"cached_tokens": 32},
                   "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 3},
                   "total_tokens": 42}  # fmt: skip
RESPONSES_STREAM = sse(
    ("response.created", {"type": "response.created", "sequence_number": 0, "response": RESPONSE}),
    ("response.in_progress", {"type": "response.in_progress", "sequence_number": 1,
                              "response": RESPONSE}),
    ("response.output_item.added", {"type": "response.output_item.added", "sequence_number": 2,
                                    "output_index": 0, "item": {"id": "rs_1", "type": "reasoning",
                                                                "summary": []}}),
    ("response.reasoning_summary_text.delta", {
        "type": "response.reasoning_summary_text.delta", "sequence_number": 3, "item_id": "rs_1",
        "output_index": 0, "summary_index": 0, "delta": "Greet."}),
    ("response.output_item.added", {"type": "response.output_item.added", "sequence_number": 4,
                                    "output_index": 1, "item": MESSAGE_ITEM | {"content": []}}),
    ("response.content_part.added", {"type": "response.content_part.added", "sequence_number": 5,
                                     "item_id": "msg_1", "output_index": 1, "content_index": 0,
                                     "part": {"type": "output_text", "text": ""}}),
    ("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": 6,
                                    "item_id": "msg_1", "output_index": 1, "content_index": 0,
                                    "delta": "Hi"}),
    ("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": 7,
                                    "item_id": "msg_1", "output_index": 1, "content_index": 0,
                                    "delta": " there"}),
    ("response.output_text.done", {"type": "response.output_text.done", "sequence_number": 8,
                                   "item_id": "msg_1", "output_index": 1, "content_index": 0,
                                   "text": "Hi there"}),
    ("response.output_item.done", {"type": "response.output_item.done", "sequence_number": 9,
                                   "output_index": 1, "item": MESSAGE_ITEM}),
    ("response.completed", {"type": "response.completed", "sequence_number": 10,
                            "response": RESPONSE | {"status": "completed",
                                                    "output": [MESSAGE_ITEM],
                                                    "usage": RESPONSES_USAGE}}),
)  # fmt: skip


def test_a_responses_stream_gives_its_text_reasoning_and_usage():
    reply, outputs = read("responses", RESPONSES_STREAM)
    assert outputs == [False, False, False, True, False, False, True, True, False, False, False]
    assert (reply.text, reply.reasoning_text, reply.completion) == ("Hi there", "Greet.", True)
    assert reply.usage_counts() == {
        "usage_prompt_tokens": 37, "usage_completion_tokens": 5,
        "usage_prompt_cache_read_tokens": 32, "usage_reasoning_tokens": 3,
    }  # fmt: skip
    assert reply.message() == {"role": "assistant", "content": "Hi there"}


def test_a_whole_responses_body_and_a_function_call():
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "search",
            "arguments": "{\"q\": \"x\"}", "status": "completed"}  # fmt: skip
    body = RESPONSE | {"status": "completed", "output": [MESSAGE_ITEM, call],
                       "usage": RESPONSES_USAGE}  # fmt: skip
    reply = reply_for("responses")
    reply.add_body(json.dumps(body).encode())
    assert reply.text == "Hi there" and reply.completion
    assert reply.message()["tool_calls"] == [
        {"id": "call_1", "type": "function",
         "function": {"name": "search", "arguments": "{\"q\": \"x\"}"}},
    ]  # fmt: skip


MESSAGE_START = {"type": "message_start", "message": {
    "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-x",
    "stop_reason": None, "stop_sequence": None,
    "usage": {"input_tokens": 25, "cache_creation_input_tokens": 10,
              "cache_read_input_tokens": 100, "output_tokens": 1}}}  # fmt: skip
MESSAGES_STREAM = sse(
    ("message_start", MESSAGE_START),
    ("content_block_start", {"type": "content_block_start", "index": 0,
                             "content_block": {"type": "thinking", "thinking": ""}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0,
                             "delta": {"type": "thinking_delta", "thinking": "Say hi."}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0,
                             "delta": {"type": "signature_delta", "signature": "EqQB"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("ping", {"type": "ping"}),
    ("content_block_start", {"type": "content_block_start", "index": 1,
                             "content_block": {"type": "text", "text": ""}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 1,
                             "delta": {"type": "text_delta", "text": "Hello"}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 1,
                             "delta": {"type": "text_delta", "text": "!"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 1}),
    ("content_block_start", {"type": "content_block_start", "index": 2, "content_block": {
        "type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 2,
                             "delta": {"type": "input_json_delta", "partial_json": "{\"city\""}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 2, "delta": {
        "type": "input_json_delta", "partial_json": ": \"Paris\"}"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 2}),
    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use",
                                                          "stop_sequence": None},
                       "usage": {"output_tokens": 15}}),
    ("message_stop", {"type": "message_stop"}),
)  # fmt: skip


def test_a_messages_stream_gives_its_text_thinking_tool_call_and_usage():
    reply, outputs = read("messages", MESSAGES_STREAM)
    assert [i for i, out in enumerate(outputs) if out] == [2, 7, 8, 11, 12]
    assert (reply.text, reply.reasoning_text) == ("Hello!", "Say hi.")
    assert reply.usage_counts() == {
        "usage_prompt_tokens": 135, "usage_completion_tokens": 15,
        "usage_prompt_cache_read_tokens": 100,
    }  # fmt: skip
    assert reply.message()["tool_calls"] == [{
        "id": "toolu_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
    }]  # fmt: skip


def test_a_whole_messages_body():
    body = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "text", "text": "Hello!"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 12, "output_tokens": 3}}  # fmt: skip
    reply = reply_for("messages")
    reply.add_body(json.dumps(body).encode())
    assert (reply.text, reply.completion) == ("Hello!", True)
    assert reply.usage_counts()["usage_completion_tokens"] == 3


@pytest.mark.parametrize(
    ("api", "stream", "kind", "message"),
    [
        ("messages", sse(("message_start", MESSAGE_START), ("error", {
            "type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
         "overloaded_error", "Overloaded"),
        ("responses", sse(("response.failed", {"type": "response.failed", "response": RESPONSE | {
            "status": "failed", "error": {"code": "server_error", "message": "boom"}}})),
         "server_error", "boom"),
        ("responses", sse(("error", {"type": "error", "code": "rate_limit_exceeded",
                                     "message": "slow down", "param": None})),
         "rate_limit_exceeded", "slow down"),
    ],
)  # fmt: skip
def test_errors_in_a_stream_are_server_errors(api, stream, kind, message):
    with pytest.raises(ServerError) as raised:
        read(api, stream)
    assert (raised.value.kind, str(raised.value)) == (kind, message)


def test_llama_cpp_timings_give_the_cached_tokens_where_usage_does_not():
    """llama.cpp's server reports its prompt cache in `timings.cache_n` (also when its usage
    block carries no `prompt_tokens_details`); OpenAI's own field wins where both are given."""
    timings = {"cache_n": 948, "prompt_n": 1, "prompt_ms": 3.1, "predicted_n": 4}
    usage = {"prompt_tokens": 949, "completion_tokens": 4, "total_tokens": 953}
    last = {"choices": [], "usage": usage, "timings": timings}
    reply = reply_for("chat")
    reply.add_chunk(json.dumps({"choices": [{"index": 0, "delta": {"content": "hi"}}]}).encode())
    reply.add_chunk(json.dumps(last).encode())
    assert reply.usage_counts()["usage_prompt_cache_read_tokens"] == 948
    whole = reply_for("chat")
    details = usage | {"prompt_tokens_details": {"cached_tokens": 900}}
    message = {"index": 0, "message": {"role": "assistant", "content": "hi"}}
    whole.add_body(
        json.dumps({"choices": [message], "usage": details, "timings": timings}).encode()
    )
    assert whole.usage_counts()["usage_prompt_cache_read_tokens"] == 900
    bare = reply_for("chat")  # no usage block at all: the cache count still tells
    bare.add_body(json.dumps({"choices": [message], "timings": timings}).encode())
    assert bare.usage_counts() == {"usage_prompt_cache_read_tokens": 948}


INCOMPLETE = RESPONSE | {"status": "incomplete", "output": [MESSAGE_ITEM],
                         "incomplete_details": {"reason": "max_output_tokens"},
                         "usage": RESPONSES_USAGE}  # fmt: skip


def test_why_a_reply_ended_is_read_in_chat_s_words_from_every_api():
    """A reply that hit its token limit ends `length` whatever the API calls it (Responses:
    incomplete for max_output_tokens; Messages: stop_reason max_tokens); one that ended by
    itself, `stop`."""
    assert read("responses", RESPONSES_STREAM)[0].finish == "stop"  # completed
    cut_off = sse(("response.incomplete", {"type": "response.incomplete", "response": INCOMPLETE}))
    assert read("responses", cut_off)[0].finish == "length"
    whole = reply_for("responses")
    whole.add_body(json.dumps(INCOMPLETE).encode())
    assert whole.finish == "length"
    assert read("messages", MESSAGES_STREAM)[0].finish == "tool_calls"  # tool_use
    limited = sse(("message_start", MESSAGE_START), ("message_delta", {
        "type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
        "usage": {"output_tokens": 16}}))  # fmt: skip
    assert read("messages", limited)[0].finish == "length"
    body = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "text", "text": "Hi"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 12, "output_tokens": 3}}  # fmt: skip
    ended = reply_for("messages")
    ended.add_body(json.dumps(body).encode())
    assert ended.finish == "stop"
    chat = reply_for("chat")
    for chunk in (
        {"choices": [{"delta": {"content": "Hi"}, "finish_reason": None}]},
        {"choices": [{"delta": {}, "finish_reason": "length"}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
    ):
        chat.add_chunk(json.dumps(chunk).encode())
    assert chat.finish == "length"  # a usage chunk after it does not forget it
    completion = reply_for("completions")
    completion.add_body(b'{"choices": [{"text": "Hi", "finish_reason": "stop"}]}')
    assert completion.finish == "stop"
