"""The structural rules of a dag_jsonl file that a field-level schema cannot state.

Two kinds: rules of one conversation, checked as each line is read, and rules of the whole file
(every branch target is declared, a FORK child has one parent, pre-session children are not FORK
targets, system messages sit only where a history starts, no cycles), checked once every line is
in. Both are generators of messages, so the loader can report every problem in one pass instead
of stopping at the first.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dagperf.dataset.formats.dag_jsonl.edges import NO_TURN, PRE_SESSION, Edges
from dagperf.dataset.formats.dag_jsonl.orchestrators import spine_problems
from dagperf.dataset.formats.dag_jsonl.records import ConversationRecord, TurnRecord
from dagperf.dataset.specs import REFUSED_CONTEXT_MODE, ContextMode

_SYSTEM_HINT = (
    "chat templates ignore a system message after position 0, and history is appended, so put "
    "the system prompt on the turn that starts the history or author this framing as a user "
    "message"
)


def conversation_problems(
    conv: ConversationRecord[Any], system: tuple[tuple[int, ...], ...] | None
) -> list[str]:
    """Problems visible within one conversation line; `system` holds, per turn, the positions
    of its system messages (None: it has none)."""
    turns = conv.turns
    if (
        len(turns) == 1
        and not turns[0].spawns
        and not conv.pre_session_spawns
        and not conv.conversation_level
    ):
        # One turn that forks, the common branching line: only a child listed twice is wrong.
        children = [f if isinstance(f, str) else f.child for f in turns[0].forks]
        if len(set(children)) == len(children):
            return []
    return list(_problems(conv, system or ((),) * len(turns)))


def _problems(conv: ConversationRecord[Any], system: tuple[tuple[int, ...], ...]) -> Iterator[str]:
    sid = conv.session_id
    last = len(conv.turns) - 1
    if conv.conversation_level or not conv.turns:
        yield from spine_problems(conv)
    if conv.context_mode is ContextMode.MESSAGE_ARRAY_WITHOUT_RESPONSES:
        yield f"session '{sid}' context_mode: {REFUSED_CONTEXT_MODE}"
    isolated = conv.context_mode is ContextMode.MESSAGE_ARRAY_WITH_RESPONSES
    for child in _repeated(conv.pre_session_spawns):
        yield f"session '{sid}' pre_session_spawns: child '{child}' is listed twice"
    for k, turn in enumerate(conv.turns):
        if turn.forks or turn.spawns:
            yield from _branch_entry_problems(f"session '{sid}' turn {k}", k, last, turn)
        if isolated and turn.forks:
            yield (
                f"session '{sid}' turn {k} forks, but context_mode "
                "'message_array_with_responses' sends each turn as written and keeps no "
                "history for a FORK child to continue; use spawns, or drop the context_mode"
            )
        if isolated:
            for index in system[k]:
                if index:
                    yield (
                        f"session '{sid}' turn {k}: a 'system' message must be the first of its "
                        f"turn's messages (message at index {index}); context_mode "
                        "'message_array_with_responses' sends each turn as written, and chat "
                        "templates ignore a system message after position 0"
                    )
        elif k > 0 and system[k]:
            yield from _system_messages(
                system[k],
                f"session '{sid}' turn {k}: non-root turns may not contain a 'system' message",
            )


def _branch_entry_problems(where: str, k: int, last: int, turn: TurnRecord[Any]) -> Iterator[str]:
    fork_children = [f if isinstance(f, str) else f.child for f in turn.forks]
    for child in _repeated(fork_children):
        yield f"{where}: child '{child}' is listed twice in forks"
    spawn_children = [c for s in turn.spawns for c in ([s] if isinstance(s, str) else s.children)]
    for child in _repeated(spawn_children):
        yield f"{where}: child '{child}' is listed twice in spawns"
    for entry in turn.spawns:
        if isinstance(entry, str) or entry.join_at is None:
            continue
        if entry.join_at <= k:
            yield (
                f"{where}: spawn join_at={entry.join_at} must be greater than the spawning turn "
                f"index {k}"
            )
        elif entry.join_at > last:
            yield (
                f"{where}: spawn join_at={entry.join_at} is out of range: the conversation has "
                f"{last + 1} turn(s), so join_at must be at most {last}"
            )
    if k == last:
        return
    bare = any(isinstance(f, str) or not f.background for f in turn.forks)
    background = any(not isinstance(f, str) and f.background for f in turn.forks)
    if bare and background:
        yield (
            f"{where} mixes bare and background FORK entries but is not the last turn: a bare "
            "FORK ends the parent while a background FORK keeps it running; mark every entry "
            '{"child": ..., "background": true} or move the forks to the last turn'
        )
    elif bare:
        yield (
            f"{where} has foreground FORK branches but is not the last turn and no join is "
            'declared: a bare FORK ends the parent, so use {"child": ..., "background": true} '
            "to keep the parent running, or move the forks to the last turn"
        )


@dataclass
class Noted:
    """What the whole-file rules need of some sessions, noted as their lines are read, and
    whether the lines must be read back with their conversations' own fields."""

    # The positions of the system messages in turn 0, where there are any.
    opening_system: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # Sessions whose turns are sent as written (context_mode message_array_with_responses).
    isolated: set[str] = field(default_factory=set)
    # Sessions whose line failed its schema: references to them are not reported as
    # undeclared, since that line already has its own error.
    unparsed: set[str] = field(default_factory=set)
    # Whether a line sets a field of its conversation's own (`ConversationRecord`).
    own_fields: bool = False

    def update(self, other: Noted) -> None:
        self.opening_system.update(other.opening_system)
        self.isolated |= other.isolated
        self.unparsed |= other.unparsed
        self.own_fields |= other.own_fields


def file_problems(
    edges: Edges, ids: Mapping[str, int], sids: Sequence[str], lines: Sequence[int], noted: Noted
) -> Iterator[tuple[int, str]]:
    """Problems that need the whole file, as (line, message): `ids` numbers each conversation,
    `sids` and `lines` name each by its number."""
    parent, turn = edges.parent, edges.turn
    opening_system, isolated = noted.opening_system, noted.isolated
    for i, child in edges.undeclared.items():
        if child not in noted.unparsed:
            p = int(parent[i])
            yield lines[p], _undeclared(sids[p], _turn(turn[i]), child, ids)
    by_child, first = edges.first_fork_parents()
    for i, f in zip(by_child.tolist(), first.tolist(), strict=True):
        if i != f and (parent[i], turn[i]) != (parent[f], turn[f]):
            here, there = _where(sids, parent, turn, i), _where(sids, parent, turn, f)
            yield lines[int(parent[i])], _two_fork_parents(sids[int(edges.child[i])], there, here)
    fork_children = edges.child[first]
    pre = np.flatnonzero((edges.kind == PRE_SESSION) & (edges.child >= 0))
    for i in pre[np.isin(edges.child[pre], fork_children)].tolist():
        p = int(parent[i])
        yield lines[p], _pre_session_fork_target(sids[p], sids[int(edges.child[i])])
    yield from _forked_system(edges, ids, sids, opening_system, lines, first)
    numbers = np.fromiter((ids[sid] for sid in isolated), np.int64, len(isolated))
    for n in numbers[np.isin(numbers, fork_children)].tolist():
        yield (
            lines[n],
            (
                f"session '{sids[n]}' is a FORK target, but its context_mode "
                "'message_array_with_responses' sends its turns as written, dropping the history "
                "a FORK child continues; only a SPAWN child may start that way"
            ),
        )
    starters = edges.starters(len(sids))
    # Only conversations that start others can lie on a cycle: the rest stay out of the search.
    children_of: dict[str, list[str]] = {}
    declared = np.flatnonzero(edges.child >= 0)
    for i in declared[starters[edges.child[declared]]].tolist():
        children_of.setdefault(sids[int(parent[i])], []).append(sids[int(edges.child[i])])
    for cycle in _cycles(children_of):
        yield lines[ids[cycle[-2]]], "cycle detected: " + " -> ".join(cycle)


def _forked_system(
    edges: Edges,
    ids: Mapping[str, int],
    sids: Sequence[str],
    opening_system: Mapping[str, tuple[int, ...]],
    lines: Sequence[int],
    first: NDArray[np.int64],
) -> Iterator[tuple[int, str]]:
    """A FORK child continues its parent's history, so its turn 0 may hold no system message."""
    if not opening_system:
        return
    parent_of = dict(zip(edges.child[first].tolist(), edges.parent[first].tolist(), strict=True))
    for sid, positions in opening_system.items():
        if (n := ids[sid]) in parent_of:
            for problem in _system_messages(
                positions,
                f"session '{sid}' turn 0: non-root turns may not contain a 'system' message "
                f"(this FORK child continues the history of '{sids[parent_of[n]]}')",
            ):
                yield lines[n], problem


def _turn(turn: np.int64) -> int | None:
    return None if turn == NO_TURN else int(turn)


def _where(
    sids: Sequence[str], parent: NDArray[np.int64], turn: NDArray[np.int64], i: int
) -> tuple[str, int | None]:
    return sids[int(parent[i])], _turn(turn[i])


def _pre_session_fork_target(sid: str, child: str) -> str:
    return (
        f"session '{child}' is referenced by '{sid}' pre_session_spawns but is also a FORK "
        "target; pre-session children must be SPAWN-mode (they have no parent history to inherit)"
    )


def _two_fork_parents(
    child: str, first: tuple[str, int | None], second: tuple[str, int | None]
) -> str:
    return (
        f"session '{child}' forked by both '{first[0]}' turn {first[1]} and '{second[0]}' turn "
        f"{second[1]}; FORK-mode children require a single parent, whose history they continue"
    )


def _system_messages(positions: tuple[int, ...], prefix: str) -> Iterator[str]:
    for index in positions:
        yield f"{prefix} (message at index {index}); {_SYSTEM_HINT}"


def _repeated(items: list[str]) -> list[str]:
    if len(items) < 2 or len(set(items)) == len(items):  # the common case, without a Counter
        return []
    return [item for item, count in Counter(items).items() if count > 1]


def _undeclared(sid: str, turn: int | None, child: str, declared: Collection[str]) -> str:
    where = "pre_session_spawns" if turn is None else f"turn {turn}"
    known = sorted(declared)
    shown = repr(known[:10])[:-1] + (f", ... {len(known) - 10} more]" if len(known) > 10 else "]")
    message = (
        f"session '{sid}' {where}: branch target '{child}' not declared. Known sessions: {shown}"
    )
    # difflib is quadratic-ish; on huge files a suggestion is not worth seconds of CPU.
    if len(known) <= 10_000 and (close := difflib.get_close_matches(child, known, n=1)):
        message += f" (did you mean '{close[0]}'?)"
    return message


def _cycles(children_of: dict[str, list[str]]) -> Iterator[list[str]]:
    """Each distinct cycle once, as a path that ends where it starts.

    Iterative depth-first search: a FORK chain tens of thousands deep is a legal file and must
    not hit Python's recursion limit.
    """
    state: dict[str, int] = {}  # 1 while on the current path, 2 once finished
    seen: set[tuple[str, ...]] = set()
    for start in children_of:
        if start in state:
            continue
        path = [start]
        position = {start: 0}
        stack = [iter(children_of[start])]  # every start has children here
        state[start] = 1
        while stack:
            for child in stack[-1]:
                if state.get(child) == 1:
                    cycle = (*path[position[child] :], child)
                    if cycle not in seen:
                        seen.add(cycle)
                        yield list(cycle)
                elif child not in state:
                    state[child] = 1
                    position[child] = len(path)
                    path.append(child)
                    stack.append(iter(children_of.get(child, ())))
                    break
            else:
                stack.pop()
                done = path.pop()
                del position[done]
                state[done] = 2
