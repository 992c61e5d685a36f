"""What every dataset format's request carries for the wire, validated alike: the messages,
and the few body fields a turn may set. Unknown keys are refused so a typo such as `max_token`
fails the load instead of silently changing the run.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dagperf.dataset.limits import MAX_TOKENS


def with_roles(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` as given, or a ValueError naming the first one without a role string."""
    for index, message in enumerate(messages):
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise ValueError(
                f"each message must have a 'role' string, but message at index {index} "
                + ("does not" if role is None else f"has role {role!r}")
            )
    return messages


class RequestContent(BaseModel):
    """A request's own part: the worker adds the history and the endpoint's fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    messages: list[dict[str, Any]] = Field(
        min_length=1,
        description="Messages appended to the history and sent; each needs a 'role'.",
    )
    model: str | None = Field(default=None, min_length=1, description="Per-turn model override.")
    max_tokens: int | None = Field(default=None, description="Maximum completion tokens.")
    tools: list[dict[str, Any]] | None = Field(default=None, description="Tool definitions.")
    extra: dict[str, Any] | None = Field(
        default=None,
        description="Any other body field (temperature, ignore_eos, ...), merged into the top "
        "level of the request body.",
    )

    @field_validator("messages")
    @classmethod
    def _each_message_has_a_role(cls, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return with_roles(messages)

    @field_validator("max_tokens", mode="before")
    @classmethod
    def _max_tokens_is_a_positive_integer(cls, value: Any) -> Any:
        # bool is an int in Python: `"max_tokens": true` would silently become a 1-token reply.
        if value is None:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"must be a positive integer, got {value!r}")
        if value < 1:
            raise ValueError(f"must be a positive integer, got {value}")
        if value > MAX_TOKENS:
            raise ValueError(f"must be at most {MAX_TOKENS} (2^31 - 1), got {value}")
        return value

    @field_validator("extra")
    @classmethod
    def _extra_keeps_the_history(cls, extra: dict[str, Any] | None) -> dict[str, Any] | None:
        if extra and "messages" in extra:
            raise ValueError("may not set 'messages': it would replace the conversation history")
        return extra
