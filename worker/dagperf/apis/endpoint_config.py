"""The server under test and the shape of the requests sent to it: one definition for the
`dagperf profile` and `dagperf scheduler` flags, the workers' settings and the exports (which
record it with the API key redacted). Its type is a key of the table of APIs."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from dagperf.apis import APIS, described, unknown
from dagperf.vocabulary.config import MAX_SECONDS, api_key_problem, header_names

# The request headers that routers people run read as a session key (docs/backends.md has the
# table): vLLM Router's consistent_hash (X-Session-ID, before the unique X-Request-ID it would
# otherwise hash), SGLang Model Gateway's consistent_hash (X-SMG-Routing-Key), NVIDIA Dynamo's
# session affinity (X-Dynamo-Session-ID), and dagperf's own name, which its simulator reads.
AFFINITY_HEADERS = (
    "X-Session-ID",
    "X-SMG-Routing-Key",
    "X-Dynamo-Session-ID",
    "X-Session-Affinity",
)


class EndpointConfig(BaseModel):
    """The server under test and the shape of the requests sent to it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(description="Server base URL; a missing scheme means http://.")
    endpoint_type: str = Field(
        default="chat", description=f"The API to call (`dagperf.apis`): {described()}."
    )
    endpoint: str | None = Field(
        default=None, description="Request path, when not the standard one for the type."
    )
    model: str = Field(min_length=1, description="Model name for turns that do not set one.")
    streaming: bool = Field(default=False, description="Stream responses (server-sent events).")
    api_key: SecretStr | None = Field(default=None, description="Bearer token for the server.")
    extra_inputs: dict[str, Any] = Field(
        default_factory=dict,
        description="Fields added to every request body; a turn's own `extra` wins.",
    )
    request_timeout_seconds: float = Field(
        default=600.0,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="Per-request timeout, from send to the last byte.",
    )
    session_affinity_headers: list[str] = Field(
        default_factory=lambda: list(AFFINITY_HEADERS),
        description="Headers carrying each request's routing key (a FORK tree's root key), so "
        "session-affine and KV-aware routers keep a tree on one backend; empty to send none.",
    )
    backend_headers: list[str] = Field(
        default_factory=list,
        description="Response headers that name the backend (pod) that served a request, "
        "tried in order; without one, the address that answered names it.",
    )

    @field_validator("endpoint_type")
    @classmethod
    def _known_api(cls, name: str) -> str:
        if name not in APIS:  # the table, not a Literal: an API registered later counts too
            raise ValueError(unknown(name))
        return name

    @field_validator("backend_headers", "session_affinity_headers")
    @classmethod
    def _header_names(cls, names: list[str]) -> list[str]:
        return header_names(names)

    @field_validator("api_key", mode="before")
    @classmethod
    def _sendable_key(cls, key: Any) -> Any:
        if isinstance(key, SecretStr):
            key = key.get_secret_value()
        if isinstance(key, str):
            key = key.strip()  # a key read from a file or a Secret often ends in a newline
            if problem := api_key_problem(key):
                raise ValueError(problem)
        return key or None

    @field_validator("url")
    @classmethod
    def _with_scheme(cls, url: str) -> str:
        url = url.strip().rstrip("/")
        if "://" not in url:
            url = "http://" + url
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        return url

    @model_validator(mode="after")
    def _endpoint_path(self) -> EndpointConfig:
        if self.endpoint is not None and not self.endpoint.startswith("/"):
            raise ValueError(f"endpoint must be a path starting with '/', got {self.endpoint!r}")
        return self

    @property
    def request_url(self) -> str:
        return self.url + (self.endpoint or APIS[self.endpoint_type].path)

    def redacted(self) -> dict[str, Any]:
        """For exports and logs: the API key never leaves the process."""
        out = self.model_dump(mode="json")
        out["api_key"] = "<redacted>" if self.api_key else None
        return out
