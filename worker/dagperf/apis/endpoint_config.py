"""The server under test and the shape of the requests sent to it: one definition for the
`dagperf profile` and `dagperf scheduler` flags, the workers' settings and the exports (which
record it with the API key redacted). Its type is a key of the table of APIs."""

from __future__ import annotations

import json
from typing import Annotated, Any, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from dagperf.apis import APIS, described, unknown
from dagperf.vocabulary.config import MAX_SECONDS, api_key_problem, header_names
from dagperf.vocabulary.options import Option

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


def extra_input(text: str) -> dict[str, Any]:
    """One --extra-inputs: KEY:VALUE (VALUE read as JSON when it is JSON), or a JSON object."""
    if text.lstrip().startswith("{"):
        try:
            value = json.loads(text)
        except ValueError as e:
            raise ValueError(f"not a JSON object: {e}") from None
        if not isinstance(value, dict):
            raise ValueError("not a JSON object")
        return value
    key, sep, raw = text.partition(":")
    if not sep or not key:
        raise ValueError(f"expected KEY:VALUE or a JSON object, got {text!r}")
    try:
        return {key: json.loads(raw)}
    except ValueError:
        return {key: raw}


_SECRET = (
    "a Benchmark names a Secret instead (endpoint.apiKeySecretRef), given to the worker pods "
    "only as an environment variable: a key in a spec or a command line is readable by anyone "
    "who can read pods"
)


class EndpointOptions(BaseModel):
    """The server under test and the shape of the requests sent to it, as a run is asked for
    them: its URL and model may still be unknown (the simulator's, the server's first)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = Field(
        default=None,
        description="The server's base URL; a missing scheme means http:// (`dagperf profile` "
        "without one: the built-in simulator).",
    )
    model: Annotated[str | None, Option(aliases=("-m",))] = Field(
        default=None,
        min_length=1,
        description="The model for turns that name none (default: the first the server lists).",
    )
    endpoint_type: Annotated[
        str, Option(benchmark="type", choices=lambda: tuple(APIS), described=described)
    ] = Field(default="chat", description="The API to call")
    endpoint: Annotated[str | None, Option(metavar="PATH", benchmark="path")] = Field(
        default=None, description="The request path, when not the standard one for the type."
    )
    streaming: Annotated[bool, Option(benchmark_default=True)] = Field(
        default=False,
        description="Stream responses (server-sent events); time to first token needs it (a "
        "Benchmark streams unless it says false).",
    )
    api_key: Annotated[SecretStr | None, Option(local=_SECRET)] = Field(
        default=None, description="The bearer token (default: $OPENAI_API_KEY)."
    )
    extra_inputs: Annotated[
        dict[str, Any],
        Option(
            metavar="KEY:VALUE", parse=extra_input, render=lambda v: json.dumps(v, sort_keys=True)
        ),
    ] = Field(
        default_factory=dict,
        description="Fields added to every request body (repeatable: KEY:VALUE, VALUE read as "
        "JSON when it is, or a whole JSON object); a turn's own `extra` wins.",
    )
    request_timeout_seconds: Annotated[float, Option(metavar="S")] = Field(
        default=600.0,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="A request with no complete response within this many seconds of being "
        "sent fails with a TimeoutError record.",
    )
    session_affinity_headers: Annotated[
        list[str], Option(flag="session-affinity-header", metavar="NAME")
    ] = Field(
        default_factory=lambda: list(AFFINITY_HEADERS),
        description="Request headers carrying each request's routing key, a FORK tree's root "
        "key, so session-affine and KV-aware routers keep a tree on one backend (repeatable; "
        "'' sends none); see docs/backends.md.",
    )
    backend_headers: Annotated[list[str], Option(flag="backend-header", metavar="NAME")] = Field(
        default_factory=list,
        description="Response headers naming the backend (pod) that served each request, tried "
        "in order (repeatable; default: the address that answered); see docs/backends.md.",
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
    def _with_scheme(cls, url: str | None) -> str | None:
        if url is None:
            return None
        url = url.strip().rstrip("/")
        if "://" not in url:
            url = "http://" + url
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        return url

    @model_validator(mode="after")
    def _endpoint_path(self) -> Self:
        if self.endpoint is not None and not self.endpoint.startswith("/"):
            raise ValueError(f"endpoint must be a path starting with '/', got {self.endpoint!r}")
        return self


class EndpointConfig(EndpointOptions):
    """The server under test and the shape of the requests sent to it, once a run knows them."""

    url: str = Field(description="Server base URL; a missing scheme means http://.")
    model: str = Field(min_length=1, description="Model name for turns that do not set one.")

    @property
    def request_url(self) -> str:
        return self.url + (self.endpoint or APIS[self.endpoint_type].path)

    def redacted(self) -> dict[str, Any]:
        """For exports and logs: the API key never leaves the process."""
        out = self.model_dump(mode="json")
        out["api_key"] = "<redacted>" if self.api_key else None
        return out
