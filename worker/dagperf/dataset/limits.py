"""The bounds every dataset format is held to, so whatever `validate` accepts, a run can send.

A value past these is not a workload but a typo or an attack: a `max_tokens` no server takes, a
delay of 1e308 ms that would hang the run, a prompt of 2^40 tokens that would fill the memory,
an integer no JSON reader of a server can hold, a line nested so deep that parsing it recurses
past any stack. Each is refused with its line, before anything starts.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any

from pydantic import Field

MAX_TOKENS = 2**31 - 1  # max_tokens and output lengths: the largest any server's int32 takes
MAX_PROMPT_TOKENS = 10_000_000  # a synthetic prompt's length; ten times today's longest contexts
MAX_WAIT_S = 86_400.0  # one wait between requests: a day
MAX_ARRIVAL_S = 7 * 86_400.0  # a session's arrival in a timed trace: a week
MAX_DEPTH = 64  # JSON nesting of one line; a tool schema needs a dozen levels
INT64 = (-(2**63), 2**63 - 1)  # what a request body's integers must fit (servers read int64)

OutputTokens = Annotated[int, Field(ge=1, le=MAX_TOKENS, strict=True)]
PromptTokens = Annotated[int, Field(ge=1, le=MAX_PROMPT_TOKENS, strict=True)]


def _time(most: float) -> Any:
    return Annotated[float, Field(ge=0, le=most, strict=True, allow_inf_nan=False)]


WaitSeconds = _time(MAX_WAIT_S)
WaitMs = _time(MAX_WAIT_S * 1000)
ArrivalSeconds = _time(MAX_ARRIVAL_S)
ArrivalMs = _time(MAX_ARRIVAL_S * 1000)

_STRING_OR_BRACKET = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')
# Only a line with a run of 19 digits can hold an integer past int64, and only one with an
# exponent of three digits (e308, E+308) a float past 1e308; NaN and Infinity are what some
# writers emit for non-JSON floats. The line is mapped to its shape (digits to 0, e, E and + to
# e, the rest to spaces) in one C-speed pass and searched for those runs: a regular expression
# would try its alternatives at every letter of every prompt.
_SHAPE = bytes(
    ord("0") if chr(c).isdigit() and c < 128 else ord("e") if c in b"eE+" else ord(" ")
    for c in range(256)
)
_DIGITS, _EXPONENT = b"0" * 19, b"e000"  # e+308 has the shape ee000


def suspect_number(raw: bytes) -> bool:
    """Whether a line may hold a number a server cannot read; False is sure."""
    return b"NaN" in raw or b"Infinity" in raw or suspect_digits(raw)


def suspect_digits(raw: bytes) -> bool:
    """Whether bytes (one line or many) may hold an integer past 64 bits or a float past 1e308;
    False is sure. NaN and Infinity are left out: a JSON parser refuses them, wherever they
    sit, and the lines it refuses are checked again one by one."""
    shape = raw.translate(_SHAPE)
    return _DIGITS in shape or _EXPONENT in shape


def line_problem(raw: bytes, numbers: bool = True) -> str | None:
    """What makes a line unsafe to parse or to send, checked on its bytes first (cheaply:
    a line without the telltale bytes is not walked); `numbers` False when `suspect_digits`
    already cleared the line with its neighbours (a NaN or Infinity is then the parser's to
    refuse, and the line is checked again)."""
    if too_deep(raw):
        return f"nested more than {MAX_DEPTH} levels deep; no request needs that"
    if not numbers or not suspect_number(raw):
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None  # the format's own parser reports invalid JSON
    return _number_problem(value)


def too_deep(raw: bytes) -> bool:
    return raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _depth(raw) > MAX_DEPTH


def _depth(raw: bytes) -> int:
    depth = deepest = 0
    for match in _STRING_OR_BRACKET.finditer(raw):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in (b"]", b"}"):
            depth -= 1
    return deepest


def _number_problem(value: Any) -> str | None:
    """The first integer outside int64 or non-finite number, by its path; no recursion."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, dict):
            stack.extend((f"{path}.{key}" if path else str(key), v) for key, v in item.items())
        elif isinstance(item, list):
            stack.extend((f"{path}.{i}" if path else str(i), v) for i, v in enumerate(item))
        elif isinstance(item, bool):
            continue
        elif isinstance(item, int) and not INT64[0] <= item <= INT64[1]:
            return f"{path}: {_short(item)} does not fit in 64 bits, as a server reads integers"
        elif isinstance(item, float) and not math.isfinite(item):
            return f"{path}: {item} is not a finite number"
    return None


def _short(number: int) -> str:
    text = str(number)
    return text if len(text) <= 30 else f"{text[:12]}...({len(text)} digits)"
