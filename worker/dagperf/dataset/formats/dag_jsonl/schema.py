"""The dag_jsonl file format: one conversation per line, as strict pydantic models.

A turn carries the fields that go on the wire (`messages`, `model`, `max_tokens`, `tools`, and
`extra`, merged into the top level of the request body) and the structural fields the scheduler
consumes (`forks`, `spawns`, `delay`), which never reach the server. Unknown keys are refused
everywhere so a typo such as `max_token` fails the load instead of silently changing the run.

These models check one line's fields in isolation. Rules between fields (what an orchestrator
needs, `orchestrators.py`) and rules that need the whole file (targets exist, one FORK parent, no
cycles, where a system message may sit) live in `rules.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictInt,
    Tag,
)

from dagperf.dataset.content import RequestContent
from dagperf.dataset.formats.dag_jsonl.records import MAX_ROUNDS
from dagperf.dataset.limits import WaitMs
from dagperf.dataset.loader import BARE, COUNT, LIST, OBJECT
from dagperf.dataset.specs import ContextMode

SessionId = Annotated[str, Field(min_length=1, description="A conversation's session_id.")]


def _entry_form(value: Any) -> str | None:
    """Route a branch entry to its bare-string or object form; anything else is refused."""
    if isinstance(value, str):
        return BARE
    if isinstance(value, dict):
        return OBJECT
    return None


class ForkEntry(BaseModel):
    """Object form of a FORK entry; a bare string `"c"` means `{"child": "c"}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    child: SessionId = Field(description="The conversation that continues this history.")
    background: StrictBool = Field(
        default=False,
        description="Keep running the parent's remaining turns while the child runs. "
        "Without it a FORK ends the parent, so it may sit only on the last turn.",
    )


class SpawnEntry(BaseModel):
    """Object form of a SPAWN entry: children that start fresh, joined at `join_at`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    children: list[SessionId] = Field(min_length=1, description="Conversations to start fresh.")
    join_at: StrictInt | None = Field(
        default=None,
        description="The parent turn that waits for these children to finish; the parent runs "
        "the turns before it concurrently. Defaults to the turn after the spawning one.",
    )


def _bare_or_object(model: type[BaseModel], key: str, shape: str) -> Any:
    """A branch entry: a bare session id, or the object form `model`, with one clear error."""
    return Annotated[
        Annotated[SessionId, Tag(BARE)] | Annotated[model, Tag(OBJECT)],
        Discriminator(
            _entry_form,
            custom_error_type=f"{key}_entry",
            custom_error_message=f"a {key} entry must be a session id string or an object {shape}",
        ),
    ]


if TYPE_CHECKING:  # what the validators below produce
    ForkItem = SessionId | ForkEntry
    SpawnItem = SessionId | SpawnEntry
else:
    ForkItem = _bare_or_object(ForkEntry, "forks", '{"child": ..., "background": ...}')
    SpawnItem = _bare_or_object(SpawnEntry, "spawns", '{"children": [...], "join_at": ...}')


class DagTurn(RequestContent):
    """One turn: the request it sends and the branches it starts when it completes."""

    forks: list[ForkItem] = Field(
        default_factory=list, description="Children that continue this turn's full history."
    )
    spawns: list[SpawnItem] = Field(
        default_factory=list, description="Children that start from an empty history."
    )
    delay: WaitMs = Field(
        default=0.0,
        description="Milliseconds to wait, once the turn is ready, before sending it.",
    )


class DagRound(BaseModel):
    """One round of an orchestrator's list of rounds: its own children, and its own wait."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spawns: list[SessionId] = Field(
        min_length=1, description="Conversations this round starts fresh, all at once."
    )
    think_time_ms: WaitMs | None = Field(
        default=None,
        description="Milliseconds to wait before this round, once the one before has ended "
        "(default: the conversation's think_time_ms).",
    )


def _rounds_form(value: Any) -> str | None:
    """Route `rounds` to its count or list form; anything else (a boolean too) is refused."""
    if isinstance(value, int) and not isinstance(value, bool):
        return COUNT
    return LIST if isinstance(value, list) else None


Rounds = Annotated[
    Annotated[Annotated[StrictInt, Field(ge=1, le=MAX_ROUNDS)], Tag(COUNT)]
    | Annotated[Annotated[list[DagRound], Field(min_length=1, max_length=MAX_ROUNDS)], Tag(LIST)],
    Discriminator(
        _rounds_form,
        custom_error_type="rounds",
        custom_error_message="must be a count (an integer of at least 1) or a list of "
        'rounds, each {"spawns": [...], "think_time_ms": ...}',
    ),
]


class DagConversation(BaseModel):
    """One line of the file: a session with ordered turns, or an orchestrator's spine."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    session_id: SessionId = Field(description="Unique across the file.")
    turns: list[DagTurn] = Field(
        default_factory=list, description="Ordered turns, at least one unless an orchestrator."
    )
    pre_session_spawns: list[SessionId] = Field(
        default_factory=list,
        description="Fire-and-forget SPAWN children sent before this conversation's turn 0.",
    )
    context_mode: ContextMode | None = Field(
        default=None,
        description="How this conversation's turns build their history (default "
        "deltas_without_responses); message_array_with_responses sends each turn as written.",
    )
    orchestrator: StrictBool = Field(
        default=False,
        description="A conversation that sends no request and starts its spawns in rounds.",
    )
    spawns: list[SessionId] = Field(
        default_factory=list,
        description="An orchestrator's children, started together in each round (or once).",
    )
    rounds: Rounds | None = Field(
        default=None,
        description="An orchestrator's rounds: a count re-starting its spawns each round, or a "
        "list, each round with its own spawns; each round waits for the one before to end.",
    )
    think_time_ms: WaitMs | None = Field(
        default=None, description="Milliseconds an orchestrator waits before each round."
    )
    think_time_sigma: (
        Annotated[float, Field(gt=0, le=10, strict=True, allow_inf_nan=False)] | None
    ) = Field(
        default=None,
        description="Draw each round's think time from a lognormal with think_time_ms as its "
        "median and this log-space deviation (reproducible under --random-seed).",
    )
    think_time_min_ms: WaitMs | None = Field(
        default=None, description="Lower bound of a drawn think time."
    )
    think_time_max_ms: WaitMs | None = Field(
        default=None, description="Upper bound of a drawn think time."
    )
