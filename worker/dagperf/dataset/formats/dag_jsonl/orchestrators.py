"""The rules of an orchestrator line, AIPerf's request-free conversation that starts its children
in rounds: which fields it needs, which it may not set, and which only an orchestrator may.

An orchestrator authors no turns: its spine is made of gates (`records.spine`), one per round
and a last one, or a single gate without `rounds`. Its think times wait before each round; a
sigma draws them from a lognormal around that median, which the clamps bound. Each rule is a
message, so a line shows every problem at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from dagperf.dataset.formats.dag_jsonl.records import ConversationRecord

_THINK_FIELDS = ("think_time_ms", "think_time_sigma", "think_time_min_ms", "think_time_max_ms")


def spine_problems(conv: ConversationRecord[Any]) -> Iterator[str]:
    """What is wrong with a line's conversation-level fields, each as a message."""
    sid = conv.session_id
    where = f"session '{sid}'"
    think = [name for name in _THINK_FIELDS if getattr(conv, name) is not None]
    if not conv.orchestrator:
        if conv.rounds is not None:
            yield f'{where} rounds: only an orchestrator has rounds (set "orchestrator": true)'
        if conv.spawns:
            yield (
                f"{where} spawns: conversation-level spawns belong to an orchestrator; a "
                "conversation spawns from its turns (turns[k].spawns)"
            )
        if think:
            yield (f"{where} {', '.join(think)}: think times belong to an orchestrator with rounds")
        if not conv.turns:
            yield f"{where} turns: at least one turn is needed (only an orchestrator has none)"
        return
    if conv.turns:
        yield (
            f"{where} turns: an orchestrator authors no turns (it sends no request; its rounds "
            "start its spawns); move the turns to a conversation it spawns"
        )
    if conv.pre_session_spawns:
        yield (f"{where} pre_session_spawns: not on an orchestrator; list its children in spawns")
    if isinstance(conv.rounds, list):
        if conv.spawns:
            yield (
                f"{where} spawns: with a list of rounds each round names its own spawns; drop "
                "the conversation-level spawns"
            )
        yield from _rounds_share_children(where, conv.rounds)
    elif not conv.spawns:
        yield f"{where} spawns: an orchestrator needs the children it starts (or a list of rounds)"
    for child in _repeated(conv.spawns):
        yield f"{where} spawns: child '{child}' is listed twice"
    yield from _think_problems(where, conv)


def _rounds_share_children(where: str, rounds: list[Any]) -> Iterator[str]:
    first: dict[str, int] = {}
    for k, round_ in enumerate(rounds):
        for child in _repeated(round_.spawns):
            yield f"{where} rounds[{k}].spawns: child '{child}' is listed twice"
        for child in dict.fromkeys(round_.spawns):
            if child in first:
                yield (
                    f"{where} rounds[{k}].spawns: child '{child}' is also in round "
                    f"{first[child]}; each round of a list spawns its own conversations, so "
                    "its records say which round they belong to"
                )
            else:
                first[child] = k


def _think_problems(where: str, conv: ConversationRecord[Any]) -> Iterator[str]:
    if conv.think_time_ms is not None and conv.rounds is None:
        yield (
            f"{where} think_time_ms: the wait before each round needs rounds; an "
            "orchestrator without them starts its spawns once"
        )
    if conv.think_time_sigma is not None and conv.think_time_ms is None:
        yield f"{where} think_time_sigma: needs think_time_ms, the median it draws around"
    clamps = [n for n in ("think_time_min_ms", "think_time_max_ms") if getattr(conv, n) is not None]
    if clamps and conv.think_time_sigma is None:
        yield (
            f"{where} {', '.join(clamps)}: bounds of a drawn think time need think_time_sigma; "
            "a fixed think time has nothing to bound"
        )
    low, high = conv.think_time_min_ms, conv.think_time_max_ms
    if low is not None and high is not None and low > high:
        yield f"{where} think_time_min_ms: {low:g} is above think_time_max_ms {high:g}"


def _repeated(items: list[str]) -> list[str]:
    if len(set(items)) == len(items):
        return []
    return [item for item, count in Counter(items).items() if count > 1]
