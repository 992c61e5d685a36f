"""`inputs.json`: the request body each conversation's turns would send, before any history.

One entry per conversation (in the file's order for dag_jsonl, else in the order the trees reach
them), with a payload per turn: what the turn authors plus the endpoint's fields, as
`{"data": [{"session_id", "payloads"}]}`. Written as a stream, so a large dataset is never held
twice.
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
    with whole_or_nothing(path, "wb") as f:
        f.write(b'{"data": [')
        for count, (sid, payloads) in enumerate(graph.conversations()):
            bodies = [api.body(api.params(p, endpoint), p.messages) for p in payloads]
            f.write(b",\n" if count else b"\n")
            f.write(encode({"session_id": sid, "payloads": bodies}))
        f.write(b"\n]}\n")
