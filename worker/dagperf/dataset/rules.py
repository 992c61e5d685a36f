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
from collections.abc import Iterator, Mapping

from dagperf.dataset.dag_lines import Conversation
from dagperf.dataset.dag_records import Branch, BranchMode, ConversationRecord, TurnRecord

_SYSTEM_HINT = (
    "chat templates ignore a system message after position 0, and history is appended, so put "
    "the system prompt on the turn that starts the history or author this framing as a user "
    "message"
)


def conversation_problems(
    conv: ConversationRecord, system: tuple[tuple[int, ...], ...]
) -> Iterator[str]:
    """Problems visible within one conversation line; `system` holds, per turn, the positions
    of its system messages."""
    sid = conv.session_id
    last = len(conv.turns) - 1
    for child in _repeated(conv.pre_session_spawns):
        yield f"session '{sid}' pre_session_spawns: child '{child}' is listed twice"
    for k, turn in enumerate(conv.turns):
        if turn.forks or turn.spawns:
            yield from _branch_entry_problems(f"session '{sid}' turn {k}", k, last, turn)
        if k > 0 and system[k]:
            yield from _system_messages(
                system[k],
                f"session '{sid}' turn {k}: non-root turns may not contain a 'system' message",
            )


def _branch_entry_problems(where: str, k: int, last: int, turn: TurnRecord) -> Iterator[str]:
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


def file_problems(
    conversations: Mapping[str, Conversation],
    lines: Mapping[str, int],
    unparsed: set[str],
) -> Iterator[tuple[int, str]]:
    """Problems that need the whole file, as (line, message), in file order.

    `unparsed` names sessions whose line failed its schema: references to them are not reported
    as undeclared, since that line already has its own error.
    """
    fork_parent: dict[str, tuple[str, int | None]] = {}
    # Only conversations that start others can lie on a cycle: the rest stay out of the search.
    children_of: dict[str, list[str]] = {}
    pre_session: list[tuple[str, str]] = []
    for sid, conversation in conversations.items():
        for branch in conversation.branches:
            for child in branch.children:
                if child not in conversations:
                    if child not in unparsed:
                        yield lines[sid], _undeclared(sid, branch, child, conversations)
                    continue
                if conversations[child].branches:
                    children_of.setdefault(sid, []).append(child)
                here = (sid, branch.turn)
                if branch.turn is None:
                    pre_session.append((sid, child))
                elif branch.mode is BranchMode.FORK and fork_parent.setdefault(child, here) != here:
                    yield lines[sid], _two_fork_parents(child, fork_parent[child], here)
    for sid, child in pre_session:
        if child in fork_parent:
            yield lines[sid], _pre_session_fork_target(sid, child)
    for child, (parent, _) in fork_parent.items():
        for problem in _system_messages(
            conversations[child].opening_system,
            f"session '{child}' turn 0: non-root turns may not contain a 'system' message "
            f"(this FORK child continues the history of '{parent}')",
        ):
            yield lines[child], problem
    for cycle in _cycles(children_of):
        yield lines[cycle[-2]], "cycle detected: " + " -> ".join(cycle)


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


def _undeclared(
    sid: str, branch: Branch, child: str, conversations: Mapping[str, Conversation]
) -> str:
    where = "pre_session_spawns" if branch.turn is None else f"turn {branch.turn}"
    known = sorted(conversations)
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
