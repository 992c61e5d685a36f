"""The server a worker sends to, as the scheduler's Welcome and the worker's own configuration
describe it: the API to speak, the pool of connections, and what every request carries.

Built once per Welcome, so the API's functions are looked up once, never per request: a request
costs its body, its headers and the exchange.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import msgspec

from dagperf.apis import APIS, unknown
from dagperf.apis.conversation import Message
from dagperf.apis.reply import Reply
from dagperf.transport import protocol
from dagperf.transport.client import Exchange, exchange
from dagperf.transport.http1 import Pool
from dagperf.worker.options import WorkerConfig

_json = msgspec.json.Encoder()


class Endpoint:
    __slots__ = ("_body", "_pool", "_settings", "reply")

    def __init__(self, config: WorkerConfig, settings: protocol.WorkerSettings):
        """Raises ValueError naming what cannot be sent: an API this worker does not know (a
        scheduler of another version), a key or a header with a line break in it."""
        api = APIS.get(settings.endpoint_type)
        if api is None:
            raise ValueError(unknown(settings.endpoint_type))
        headers = {"Content-Type": "application/json", "User-Agent": "dagperf"}
        headers.update(api.request_headers(config.api_key))
        if settings.streaming:
            headers["Accept"] = "text/event-stream"
        self._pool = Pool(config.url + (config.endpoint or api.path), headers)
        self._settings = settings
        self._body = api.body
        self.reply: Callable[[], Reply] = api.reply  # an empty reply, read as the API's

    def send(
        self,
        credit: protocol.Credit,
        messages: list[Message],
        out: Exchange,
        written: Callable[[], None] | None,
    ) -> Coroutine[Any, Any, None]:
        """The exchange of one request: the credit's parameters with `messages`, its ids and
        routing key in the headers; `out` and `written` as `transport.client.exchange` takes
        them."""
        settings = self._settings
        raw = _json.encode(self._body(credit.params, messages))
        headers = {"X-Request-ID": credit.request_id, "X-Correlation-ID": credit.correlation_id}
        for name in settings.affinity_headers:
            headers[name] = credit.routing_key
        return exchange(
            self._pool,
            raw,
            headers,
            settings.timeout_s,
            out,
            settings.streaming,
            written,
            settings.backend_headers,
        )

    def close(self) -> None:
        self._pool.close()
