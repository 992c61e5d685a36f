"""A worker's own configuration, which the scheduler never sees or sets."""

from __future__ import annotations

from dataclasses import dataclass

from dagperf.vocabulary.keys import WorkerKeys


@dataclass(frozen=True, repr=False)
class WorkerConfig:
    """A worker's own configuration: its scheduler, its keys and the server it sends to."""

    scheduler: str
    worker_id: str
    keys: WorkerKeys
    url: str  # the server's base URL (EndpointConfig's normal form)
    endpoint: str | None = None  # the request path, when not the standard one for the type
    scheduler_timeout: float = 30.0
    api_key: str | None = None  # from this process's OPENAI_API_KEY, never from the scheduler
