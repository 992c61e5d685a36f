"""dag_jsonl lines as msgspec structs, and the branches a conversation declares.

The structs state what the pydantic models of `schema.py` state, so msgspec can decode a
line in one C pass; the models stay the authority on wording and describe a line the structs
refuse (rare, and worth a second parse for a good message). tests/test_dataset_fuzz.py holds
the two to the same verdicts. A turn's messages come in two forms: `Checked` reads their roles
alone (the loader's pass over the file), `Sendable` leaves them the raw bytes of the line (a
tree being built for the wire). Decoded JSON holds no reference cycles, so none of these is
tracked by the garbage collector (`gc=False`), which makes a million of them cheaper to make.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Generic, NamedTuple, TypeVar

from msgspec import Meta, Raw, Struct

from dagperf.dataset.limits import MAX_TOKENS, MAX_WAIT_S
from dagperf.dataset.specs import ContextMode

Id = Annotated[str, Meta(min_length=1)]
Text = Annotated[str, Meta(min_length=1)]
Ms = Annotated[float, Meta(ge=0, le=MAX_WAIT_S * 1000)]
MAX_ROUNDS = 100_000  # an orchestrator's rounds: each is a node of every run of its tree
M = TypeVar("M")


class ForkRecord(Struct, forbid_unknown_fields=True, frozen=True, gc=False):
    child: Id
    background: bool = False


class SpawnRecord(Struct, forbid_unknown_fields=True, frozen=True, gc=False):
    children: Annotated[list[Id], Meta(min_length=1)]
    join_at: int | None = None


class RoundRecord(Struct, forbid_unknown_fields=True, frozen=True, gc=False):
    spawns: Annotated[list[Id], Meta(min_length=1)]
    think_time_ms: Ms | None = None


class TurnRecord(Struct, Generic[M], forbid_unknown_fields=True, frozen=True, gc=False):
    messages: M
    model: Text | None = None
    max_tokens: Annotated[int, Meta(ge=1, le=MAX_TOKENS)] | None = None
    tools: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None
    forks: list[Id | ForkRecord] = []
    spawns: list[Id | SpawnRecord] = []
    delay: Ms = 0.0


class PlainRecord(Struct, Generic[M], forbid_unknown_fields=True, frozen=True, gc=False):
    """A line that sets nothing of the conversation's own (most lines): tried first, as
    a block decodes into these a fifth faster than into `ConversationRecord`s."""

    session_id: Id
    turns: list[TurnRecord[M]] = []  # empty only on an orchestrator (`rules`)
    pre_session_spawns: list[Id] = []


class ConversationRecord(PlainRecord[M], forbid_unknown_fields=True, frozen=True, gc=False):
    """A line with its conversation's own fields: an orchestrator's, or a context mode."""

    context_mode: ContextMode | None = None
    orchestrator: bool = False
    spawns: list[Id] = []
    rounds: (
        Annotated[int, Meta(ge=1, le=MAX_ROUNDS)]
        | Annotated[list[RoundRecord], Meta(min_length=1, max_length=MAX_ROUNDS)]
        | None
    ) = None
    think_time_ms: Ms | None = None
    think_time_sigma: Annotated[float, Meta(gt=0, le=10)] | None = None
    think_time_min_ms: Ms | None = None
    think_time_max_ms: Ms | None = None

    @property
    def conversation_level(self) -> bool:
        """Whether it sets a field of the conversation beyond its id, turns and pre-session
        spawns (an orchestrator's, or a context mode)."""
        return (
            self.orchestrator
            or bool(self.spawns)
            or self.context_mode is not None
            or self.rounds is not None
            or self.think_time_ms is not None
            or self.think_time_sigma is not None
            or self.think_time_min_ms is not None
            or self.think_time_max_ms is not None
        )


class Role(Struct, frozen=True, gc=False):
    """A message as the loader checks it: an object with a role string (the rest is the
    server's to read)."""

    role: Text


CheckedMessages = Annotated[list[Role], Meta(min_length=1)]
Checked = ConversationRecord[CheckedMessages]
PlainChecked = PlainRecord[CheckedMessages]
Sendable = ConversationRecord[Raw]
PlainSendable = PlainRecord[Raw]


def whole(record: PlainRecord[M]) -> ConversationRecord[M]:
    """The record with its conversation's own fields, at their defaults on a plain one."""
    if isinstance(record, ConversationRecord):
        return record
    return ConversationRecord(record.session_id, record.turns, record.pre_session_spawns)


class BranchMode(StrEnum):
    FORK = "fork"
    SPAWN = "spawn"


class Branch(NamedTuple):
    """One branch as the file means it: children started together from one point of a parent.

    Bare strings of one kind on one turn collapse into a single branch; each SPAWN object is a
    branch of its own. `branch_id` is `<session>:<turn>`, suffixed (`:fork`, `:bg_fork`,
    `:spawn`, `:spawn1`, ...) only when several branches share the turn, and `<session>:pre`
    for pre-session spawns.
    """

    branch_id: str
    mode: BranchMode
    children: tuple[str, ...]
    turn: int | None  # the spawning turn; None for pre-session spawns (sent before turn 0)
    join_at: int | None  # the parent turn that waits for the children; None when nothing waits
    background: bool = False


class Round(NamedTuple):
    """One gate of an orchestrator's spine: the children it starts, and the think time (ms)
    it waits first."""

    children: tuple[str, ...]
    think_ms: float


def spine(conv: ConversationRecord[Any]) -> list[Round]:
    """An orchestrator's gates, in order. With `rounds`, one per round, each of which the next
    waits for, then a last gate that waits for the last round; without, one gate that starts
    the children and waits for nothing."""
    if conv.rounds is None:
        return [Round(tuple(conv.spawns), 0.0)]
    default = conv.think_time_ms or 0.0
    if isinstance(conv.rounds, int):
        rounds = [Round(tuple(conv.spawns), default)] * conv.rounds
    else:
        rounds = [
            Round(tuple(r.spawns), default if r.think_time_ms is None else r.think_time_ms)
            for r in conv.rounds
        ]
    return [*rounds, Round((), 0.0)]


def conversation_branches(conv: PlainRecord[Any]) -> list[Branch]:
    """Every branch a conversation declares, pre-session spawns first, then turn by turn (an
    orchestrator's gate by gate)."""
    sid = conv.session_id
    turns = conv.turns
    if isinstance(conv, ConversationRecord) and conv.orchestrator:
        gates = spine(conv)
        last = len(gates) - 1
        return [
            Branch(f"{sid}:{k}", BranchMode.SPAWN, g.children, k, k + 1 if k < last else None)
            for k, g in enumerate(gates)
            if g.children
        ]
    if len(turns) == 1 and not conv.pre_session_spawns and not turns[0].spawns:
        forks = turns[0].forks  # the common branching line: one turn of bare forks
        bare = tuple(f for f in forks if type(f) is str)
        if bare and len(bare) == len(forks):
            return [Branch(f"{sid}:0", BranchMode.FORK, bare, 0, None)]
    out = []
    if conv.pre_session_spawns:
        out.append(
            Branch(f"{sid}:pre", BranchMode.SPAWN, tuple(conv.pre_session_spawns), None, None)
        )
    last = len(conv.turns) - 1
    for k, turn in enumerate(conv.turns):
        if not turn.forks and not turn.spawns:
            continue
        foreground = [f if isinstance(f, str) else f.child for f in turn.forks if _is_fg(f)]
        background = [f.child for f in turn.forks if not isinstance(f, str) and not _is_fg(f)]
        groups = _spawn_groups(turn.spawns, k)
        shared = (len(groups) + bool(foreground) + bool(background)) > 1
        if foreground:
            bid = f"{sid}:{k}:fork" if shared else f"{sid}:{k}"
            out.append(Branch(bid, BranchMode.FORK, tuple(foreground), k, None))
        if background:
            bid = f"{sid}:{k}:bg_fork" if shared else f"{sid}:{k}"
            out.append(Branch(bid, BranchMode.FORK, tuple(background), k, None, background=True))
        for g, (children, join_at) in enumerate(groups):
            bid = (f"{sid}:{k}:spawn" + (str(g) if g else "")) if shared else f"{sid}:{k}"
            # A bare SPAWN on the last turn has no turn to join: it is fire-and-forget.
            gate = join_at if join_at <= last else None
            out.append(Branch(bid, BranchMode.SPAWN, tuple(children), k, gate))
    return out


def _is_fg(entry: str | ForkRecord) -> bool:
    return isinstance(entry, str) or not entry.background


def _spawn_groups(entries: list[str | SpawnRecord], turn: int) -> list[tuple[list[str], int]]:
    """Consecutive bare strings form one group joined on the next turn; objects stand alone."""
    groups: list[tuple[list[str], int]] = []
    bare: list[str] = []
    for entry in entries:
        if isinstance(entry, str):
            bare.append(entry)
            continue
        if bare:
            groups.append((bare, turn + 1))
            bare = []
        join_at = turn + 1 if entry.join_at is None else entry.join_at
        groups.append((list(entry.children), join_at))
    if bare:
        groups.append((bare, turn + 1))
    return groups
