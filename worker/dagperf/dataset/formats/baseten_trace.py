"""AIPerf's `baseten_trace`: Baseten's completion traces, a Parquet or Arrow IPC table of recorded
requests, replayed with their recorded prompts (a /v1/completions workload: run it with
`--endpoint-type completions`, as AIPerf does).

    timestamp_start_unix_ms  prompt            input_tokens  output_tokens  provided_session_id
    1767225600000            "Once upon a..."  812           64             "s1"
    (optional: total_hashes, block_size, duration_e2e_ms, poor_man_session_id; others not read)

Each row is a request: its `prompt` sent as written, `output_tokens` as the reply's limit (a
recorded 0, a cancelled request, is sent as 1, as AIPerf floors it), and the body fields AIPerf
adds by default: `min_tokens` equal to that limit (so the replayed reply is as long as the
recorded one), and the recorded KV-cache hints `hash_ids` (`total_hashes`, when there are any)
and `block_size`, for a KV-aware router. They win over `--extra-inputs` of the same names, which
AIPerf refuses instead.

Sessions: rows sharing a `provided_session_id` (else, when the table has none, a
`poor_man_session_id`: AIPerf's choice of column) are one conversation's turns, in time order;
each turn is its recorded prompt, which already holds the conversation so far, so each is sent
as written (`message_array_with_responses`). A row without a session is a conversation of its
own. A conversation arrives at its first turn's `timestamp_start_unix_ms` on a fixed schedule,
the table's earliest at 0. AIPerf sends a later turn at its own time, or when the turn before
it is answered if that is later; the graph times a later turn only from that answer, so it
waits the recorded gap between the two starts less the turn before's `duration_e2e_ms` (AIPerf's
own closed-loop think time): against a server as fast as the recorded one, each turn goes at
its recorded time. Without a fixed schedule AIPerf sends it at once. AIPerf's replay
options (`--replay-speedup`, `--no-open-loop-replay`, `--open-loop-strict`, `--omit-kv-hints`,
`--no-force-min-tokens`, `--max-idle-gap-cap-seconds`, `--trace-session-sample-ratio`) have
no dagperf flags: this is AIPerf's default replay.

The table is told apart as AIPerf tells it, by its name: `.arrow` or `.ipc` is an Arrow IPC
file, anything else Parquet (gzip-compressed too, as any dagperf dataset). Every row is checked,
where AIPerf checks the first ten and the required columns of the rest; a problem names the row
(1 for the first) where a line would be. An empty prompt is refused (AIPerf sends it as an empty
list of prompts, which servers refuse). Reading needs pyarrow, an optional dependency
(`pip install 'dagperf[parquet]'`); without it the load fails saying so.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dagperf.dataset.limits import MAX_ARRIVAL_S, MAX_TOKENS
from dagperf.dataset.loader import DatasetError, Problem, Problems, load_file
from dagperf.dataset.specs import ContextMode, GraphNode, Payload, SessionSpec, TraceDataset
from dagperf.runtime.gcpause import gc_paused

REQUIRED = ("timestamp_start_unix_ms", "prompt", "input_tokens", "output_tokens")
SESSION_COLUMNS = ("provided_session_id", "poor_man_session_id")  # the first one present
OPTIONAL = ("total_hashes", "block_size", "duration_e2e_ms")
IPC_SUFFIXES = (".arrow", ".ipc")
NEEDS_PYARROW = (
    "reading a baseten_trace (Parquet or Arrow IPC) needs pyarrow, which is not installed: "
    "pip install 'dagperf[parquet]' (or 'pyarrow>=18')"
)

Count = Annotated[int, Field(ge=0)]  # read as AIPerf reads them: 5, 5.0 and "5" alike


class BasetenRow(BaseModel):
    """One recorded request: the columns dagperf reads, checked as AIPerf checks them."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    timestamp_start_unix_ms: Count = Field(description="When it started, Unix milliseconds.")
    prompt: str = Field(min_length=1, description="The completion prompt, sent as written.")
    input_tokens: Count = Field(description="The prompt's recorded length; not sent.")
    output_tokens: Annotated[int, Field(ge=0, le=MAX_TOKENS)] = Field(
        description="The reply's recorded length: its limit and min_tokens (0 is sent as 1)."
    )
    total_hashes: list[Count] = Field(
        default_factory=list, description="KV-cache block hashes, sent as hash_ids."
    )
    provided_session_id: str | Count | None = Field(default=None, description="Its session.")
    poor_man_session_id: Count | None = Field(default=None, description="A derived session.")
    duration_e2e_ms: Count | None = Field(default=None, description="Recorded duration; not read.")
    block_size: Annotated[int, Field(gt=0)] | None = Field(
        default=None, description="The hashes' block size in tokens, sent as block_size."
    )

    @field_validator("total_hashes", mode="before")
    @classmethod
    def _none_is_no_hashes(cls, value: Any) -> Any:
        return [] if value is None else value

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"expected a number or text, got {value}")
        return value


Turn = tuple[int, BasetenRow]  # with its row number


def load_baseten_trace(path: str | Path) -> TraceDataset:
    return load_file(path, read_baseten_trace)


def read_baseten_trace(lines: Iterable[bytes], source: str) -> TraceDataset:
    """Validate a Baseten table given as its bytes (a file's lines, or the open file)."""
    data = lines.read() if isinstance(lines, io.IOBase) else b"".join(lines)
    if not data:
        raise DatasetError([Problem(source, None, "empty file: a Parquet or Arrow IPC table")])
    with gc_paused():
        table = _table(data, source)
        names = set(table.column_names)
        if missing := [name for name in REQUIRED if name not in names]:
            reason = f"the table needs the columns {', '.join(missing)} (AIPerf's required four)"
            raise DatasetError([Problem(source, None, reason)])
        session_column = next((name for name in SESSION_COLUMNS if name in names), None)
        wanted = [*REQUIRED, *OPTIONAL, *([session_column] if session_column else [])]
        problems = Problems(source)
        rows = list(_rows(table.select([c for c in wanted if c in names]), problems))
        if not rows and not problems.items:
            problems.add(None, "no rows: the table needs at least one request")
        first = min((row.timestamp_start_unix_ms for _, row in rows), default=0)
        for number, row in rows:
            if (row.timestamp_start_unix_ms - first) / 1000 > MAX_ARRIVAL_S:
                problems.add(
                    number,
                    "timestamp_start_unix_ms: more than a week after the table's first "
                    "request; a trace spans at most a week (604800 s): replay a window of it",
                )
        problems.raise_any()
    return _dataset(rows, session_column, first)


def _table(data: bytes, source: str) -> Any:
    """The bytes as an Arrow table, read as the name says (Arrow IPC or Parquet)."""
    try:
        import pyarrow as pa
        import pyarrow.ipc as ipc
        import pyarrow.parquet as pq
    except ImportError:
        raise DatasetError([Problem(source, None, NEEDS_PYARROW)]) from None
    name = source.lower().removesuffix(".gz")
    as_ipc = name.endswith(IPC_SUFFIXES)
    kind = "an Arrow IPC file" if as_ipc else "a Parquet file"
    if as_ipc and data.startswith(b"PAR1"):
        reason = "named as Arrow IPC (.arrow, .ipc) but holds Parquet: name it .parquet"
        raise DatasetError([Problem(source, None, reason)])
    if not as_ipc and data.startswith(b"ARROW1"):
        reason = "holds an Arrow IPC file: name it .arrow or .ipc (a name says which it is)"
        raise DatasetError([Problem(source, None, reason)])
    try:
        if as_ipc:
            return ipc.open_file(pa.BufferReader(data)).read_all()
        return pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError, ValueError) as e:
        raise DatasetError([Problem(source, None, f"not {kind}: {e}")]) from None


def _rows(table: Any, problems: Problems) -> Iterable[Turn]:
    number = 0
    for batch in table.to_batches():
        for record in batch.to_pylist():
            number += 1
            try:
                yield number, BasetenRow.model_validate(record)
            except ValidationError as e:
                for err in e.errors(include_url=False):
                    column = str(err["loc"][0]) if err["loc"] else "row"
                    message = err["msg"].removeprefix("Value error, ")
                    problems.add(number, f"{column}: {message}")


def _dataset(rows: list[Turn], session_column: str | None, first: int) -> TraceDataset:
    sessions: dict[str, list[Turn]] = {}
    for number, row in rows:
        given = getattr(row, session_column) if session_column else None
        key = f"row-{number:06d}" if given is None else str(given)
        sessions.setdefault(key, []).append((number, row))
    for turns in sessions.values():
        turns.sort(key=lambda turn: turn[1].timestamp_start_unix_ms)  # stable: ties in order
    ordered = sorted(
        sessions.items(), key=lambda item: (item[1][0][1].timestamp_start_unix_ms, item[0])
    )
    specs = [
        SessionSpec(
            key,
            tuple(
                GraphNode(
                    str(number),
                    _payload(row),
                    parents=(k - 1,) if k else (),
                    wait_s=_think_s(turns[k - 1][1], row) if k else 0.0,
                )
                for k, (number, row) in enumerate(turns)
            ),
            start_s=(turns[0][1].timestamp_start_unix_ms - first) / 1000,
        )
        for key, turns in ordered
    ]
    return TraceDataset(specs, ContextMode.MESSAGE_ARRAY_WITH_RESPONSES, timed=True)


def _think_s(before: BasetenRow, row: BasetenRow) -> float:
    """The recorded gap between two turns' starts, less the first one's recorded duration."""
    gap = row.timestamp_start_unix_ms - before.timestamp_start_unix_ms
    return max(0, gap - (before.duration_e2e_ms or 0)) / 1000


def _payload(row: BasetenRow) -> Payload:
    limit = max(1, row.output_tokens)
    extra: dict[str, Any] = {"min_tokens": limit}
    if row.total_hashes:
        extra["hash_ids"] = row.total_hashes
    if row.block_size is not None:
        extra["block_size"] = row.block_size
    return Payload.of([{"role": "user", "content": row.prompt}], max_tokens=limit, extra=extra)


__all__ = ["REQUIRED", "BasetenRow", "load_baseten_trace", "read_baseten_trace"]
