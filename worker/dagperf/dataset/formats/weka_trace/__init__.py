"""The weka_trace format: Weka's KV-cache-tester recordings of coding-agent sessions, one JSON
document per session, or a directory of them (its `*.json` files, in name order), replayed as
AIPerf 0.13 replays them (`agent_traces`, which tracelab replays through too).

A file is checked when it is loaded: its schema (`agent_traces.schema`), then whether it can be
replayed (a PlanError names the part of it that cannot), every problem named by its line
(`wording`). Trees are built when a run reaches them, from the file read again, so a directory
of a thousand sessions holds of each only what a run must know up front.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple, Unpack

import msgspec

from dagperf.dataset.formats.agent_traces import Count, Kept, Replay, dataset, decode
from dagperf.dataset.formats.agent_traces.plan import Plan, PlanError, plan
from dagperf.dataset.formats.agent_traces.schema import Trace
from dagperf.dataset.formats.weka_trace.directory import read_each
from dagperf.dataset.formats.weka_trace.wording import problems_of
from dagperf.dataset.loader import DatasetError, Problem
from dagperf.dataset.specs import TraceDataset


def read_weka_trace(lines: Iterable[bytes], source: str, **replay: Unpack[Replay]) -> TraceDataset:
    """One session's document, given as byte lines; `source` names it in problems."""
    data = b"".join(lines)
    trace, planned = _checked(data, source)
    return dataset([Kept(source, None, trace)], [Count.of(planned)], replay)


def read_weka_directory(directory: Path, **replay: Unpack[Replay]) -> TraceDataset:
    """Every `*.json` file of a directory (not below it), one session each, in name order."""
    files = sorted(p for p in directory.glob("*.json") if p.is_file())
    if not files:
        raise DatasetError([Problem(str(directory), None, "no *.json trace files in it")])
    kept: list[Kept] = []
    counted: list[Count] = []
    found: list[Problem] = []
    owner: dict[str, Path] = {}
    for path, read in zip(files, read_each(files, _read_one), strict=True):
        if isinstance(read, list):
            found += read
        elif read.trace_id in owner:
            message = f"id: '{read.trace_id}' is also the session of {owner[read.trace_id]}"
            found.append(Problem(str(path), _id_line(path), message + ": one file each"))
        else:
            owner[read.trace_id] = path
            kept.append(Kept(str(path), path, None))
            counted.append(read.counted)  # the plan goes: the file is read again when run
    if found:
        raise DatasetError(found)
    return dataset(kept, counted, replay)


class _Read(NamedTuple):
    trace_id: str
    counted: Count


def _read_one(path: Path) -> _Read | list[Problem]:
    """What the directory keeps of one file (its plan is let go), or its problems."""
    try:
        data = path.read_bytes()
        trace, planned = _checked(data, str(path))
    except DatasetError as e:
        return e.problems
    except OSError as e:
        return [Problem(str(path), None, f"cannot read: {e.strerror or e}")]
    return _Read(trace.id, Count.of(planned))


def _checked(data: bytes, source: str) -> tuple[Trace, Plan]:
    try:
        trace = decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise DatasetError(problems_of(data, source, str(e))) from None
    try:
        return trace, plan(trace)
    except PlanError as e:
        raise DatasetError(problems_of(data, source, str(e), e.path)) from None


def _id_line(path: Path) -> int:
    from dagperf.dataset.json_places import line_of

    return line_of(path.read_bytes().decode("utf-8-sig", "replace"), ("id",))


__all__ = ["read_weka_directory", "read_weka_trace"]
