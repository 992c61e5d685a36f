"""AIPerf's `burst_gpt_trace`: BurstGPT's CSV logs of real LLM traffic, one request per row.

    Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
    5,ChatGPT,472,18,490,Conversation log

Three columns are read, by their exact names, as AIPerf reads them: `Timestamp` (seconds since
the trace began), `Request tokens` (the prompt's length) and `Response tokens` (the reply's,
sent as its limit); the others (Model, Total tokens, Log Type) are not. Each row is a
conversation of one request whose prompt is that many tokens of synthetic text, seeded by its
line (BurstGPT records no prompts and no cache blocks); a prompt of 0 tokens is one token, as
AIPerf sends it. Rows arrive at their timestamps on a fixed schedule, the first at 0.

AIPerf skips a row whose cells are not numbers without a word; dagperf refuses it with its
line, since a run that quietly sends fewer requests than the file holds is not the trace's
workload. It refuses a `Response tokens` of 0 too (BurstGPT's failed requests), which AIPerf
cannot send either (a limit is at least 1): drop those rows. A trace spans at most a week, as
every trace does here (`dataset.limits`): BurstGPT's published files span months, so cut a
window of them.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import random
from collections.abc import Iterable, Iterator
from pathlib import Path

from dagperf.dataset.limits import MAX_ARRIVAL_S, MAX_PROMPT_TOKENS, MAX_TOKENS
from dagperf.dataset.loader import Problems, load_file
from dagperf.dataset.prompts import passage
from dagperf.dataset.specs import GraphNode, Payload, SessionSpec, TraceDataset
from dagperf.runtime.gcpause import gc_paused

TIMESTAMP, REQUEST, RESPONSE = "Timestamp", "Request tokens", "Response tokens"
REQUIRED = (TIMESTAMP, REQUEST, RESPONSE)

Row = tuple[int, float, int, int]  # line, timestamp (s), request and response tokens


def load_burst_gpt_trace(path: str | Path) -> TraceDataset:
    return load_file(path, read_burst_gpt_trace)


def read_burst_gpt_trace(lines: Iterable[bytes], source: str) -> TraceDataset:
    """Validate a BurstGPT CSV given as byte lines; `source` names it in messages."""
    with gc_paused():
        problems = Problems(source)
        rows = [row for row in _rows(lines, problems) if row is not None]
        if not rows and not problems.items:
            problems.add(None, "no requests: a burst_gpt_trace file needs a header and a row")
        first = min((row[1] for row in rows), default=0.0)
        for lineno, timestamp, _, _ in rows:
            if timestamp - first > MAX_ARRIVAL_S:
                problems.add(
                    lineno,
                    f"{TIMESTAMP}: {timestamp:g} s is {timestamp - first:g} s after the first "
                    "request; a trace spans at most a week (604800 s): cut a window of it",
                )
        problems.raise_any()
    specs = [
        SessionSpec(
            f"row-{lineno:06d}",
            (GraphNode("0", _payload(lineno, request, response)),),
            start_s=timestamp - first,
        )
        for lineno, timestamp, request, response in rows
    ]
    specs.sort(key=lambda spec: spec.start_s or 0.0)  # stable: ties keep file order
    return TraceDataset(specs, None, timed=True)


def _payload(lineno: int, request: int, response: int) -> Payload:
    text = passage(max(1, request), random.Random(lineno))
    return Payload.of([{"role": "user", "content": text}], max_tokens=response)


def _rows(lines: Iterable[bytes], problems: Problems) -> Iterator[Row | None]:
    """Each row under the header with its line, or None after adding what is wrong with it."""
    lines = iter(lines)
    skipped = 0  # blank lines before the header
    for first in lines:
        if first.strip():
            break
        skipped += 1
    else:
        return
    data = b"".join(itertools.chain([first], lines))
    reader = csv.reader(io.TextIOWrapper(io.BytesIO(data), encoding="utf-8-sig", newline=""))
    try:
        header = next(reader)
        if missing := [name for name in REQUIRED if name not in header]:
            problems.add(
                skipped + 1,
                f"the CSV header needs the columns {', '.join(map(repr, missing))} "
                f"(it has {', '.join(map(repr, header))})",
            )
            return
        at = {name: header.index(name) for name in REQUIRED}
        start = skipped + reader.line_num + 1
        for cells in reader:
            if cells:
                yield _row(start, cells, at, problems)
            start = skipped + reader.line_num + 1
    except (csv.Error, UnicodeDecodeError) as e:
        problems.add(skipped + reader.line_num or None, f"not CSV text: {e}")


def _row(lineno: int, cells: list[str], at: dict[str, int], problems: Problems) -> Row | None:
    found: dict[str, float | int] = {}
    for name, index in at.items():
        cell = cells[index] if index < len(cells) else None
        value = _number(name, cell)
        if isinstance(value, str):
            problems.add(lineno, value)
        else:
            found[name] = value
    if len(found) < len(REQUIRED):
        return None
    return lineno, float(found[TIMESTAMP]), int(found[REQUEST]), int(found[RESPONSE])


def _number(name: str, cell: str | None) -> float | int | str:
    """The cell as AIPerf reads it (a float for the timestamp, an int for the counts), or what
    is wrong with it."""
    if cell is None:
        return f"{name}: missing (the row is shorter than the header)"
    try:
        value: float | int = float(cell) if name == TIMESTAMP else int(cell)
    except ValueError:
        kind = "a number of seconds" if name == TIMESTAMP else "a whole number of tokens"
        return f"{name}: expected {kind}, got {cell!r}"
    if name == TIMESTAMP:
        return value if math.isfinite(value) else f"{name}: {cell!r} is not a finite number"
    if name == REQUEST and not 0 <= value <= MAX_PROMPT_TOKENS:
        return f"{name}: must be between 0 and {MAX_PROMPT_TOKENS:,}, got {value:,}"
    if name == RESPONSE and not 1 <= value <= MAX_TOKENS:
        hint = " (a failed request: drop the row)" if value == 0 else ""
        return f"{name}: a reply's limit must be between 1 and {MAX_TOKENS:,}, got {value:,}{hint}"
    return value


__all__ = ["REQUIRED", "load_burst_gpt_trace", "read_burst_gpt_trace"]
