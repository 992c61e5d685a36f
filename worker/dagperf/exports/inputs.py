"""`inputs.json`: the request body each conversation's turns would send, before any history.

One entry per conversation in the order the trees reach them, with a payload per turn: what the
turn authors plus the endpoint's fields, as `{"data": [{"session_id", "payloads"}]}`. Written as
a stream, so a large dataset is never held twice.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from dagperf.apis import APIS
from dagperf.apis.endpoint_config import EndpointConfig
from dagperf.exports.files import whole_or_nothing
from dagperf.graph import RequestGraph


def write_inputs(path: Path, graph: RequestGraph, endpoint: EndpointConfig) -> None:
    encode = msgspec.json.Encoder().encode
    api = APIS[endpoint.endpoint_type]
    seen: set[str] = set()
    with whole_or_nothing(path, "wb") as f:
        f.write(b'{"data": [')
        for tree in graph.trees:
            for session in tree.sessions:
                if session.conversation_id in seen:
                    continue
                nodes = tree.nodes[session.first_node : session.last_node + 1]
                payloads = [
                    api.body(api.params(node.payload, endpoint), node.payload.messages)
                    for node in nodes
                ]
                f.write(b",\n" if seen else b"\n")
                f.write(encode({"session_id": session.conversation_id, "payloads": payloads}))
                seen.add(session.conversation_id)
        f.write(b"\n]}\n")
