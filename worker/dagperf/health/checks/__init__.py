"""The health checks: one module per check, or per family of checks read off one tally of the
records, named for what it checks, and `CHECKS`, the table of them in the order they are
reported (in health_check.json and on the console, which takes each title from here).

A check is a verdict (`CheckResult`) taken from a tally: an object made with the `Run` (the
checks' tolerances, the load the run was asked for, the error rate it allowed), fed every record
once, in the file's order, then asked. Checks that read the same of the records share one tally,
made once however many entries name it: `root_sessions` gives the concurrency and the rate
checks from the spans of the root sessions, `output_length` the output length and the early
stops from the replies' lengths; `request_errors` and `arrival` give one each.

Memory follows what is in flight, not the size of the run: a record holds only the fields some
check reads (`run.py`), a tally forgets what no later record can need (`arrival` and
`root_sessions` say how), and distributions are the bounded kind the run's metrics use (exact
up to 65,536 values, then 0.1% buckets). Beside the checks: `run.py`, what they read of a run,
and `figures.py`, how they report it (the worst offenders, a distribution's percentiles).

The package loads (with numpy) when a run is checked, not with every CLI: `dagperf.health`
imports it inside its functions.

A new check is a module here, with a tally that takes a `Run` and a method that gives its
`CheckResult`, and one entry in `CHECKS`: its name in health_check.json, its console title, the
tally and the method.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from dagperf.health.checks import arrival, output_length, request_errors, root_sessions
from dagperf.health.checks.arrival import Arrivals
from dagperf.health.checks.output_length import OutputLengths
from dagperf.health.checks.request_errors import RequestErrors
from dagperf.health.checks.root_sessions import Roots
from dagperf.health.checks.run import Load, Record, Run
from dagperf.health.report import CheckResult


class Tally(Protocol):
    """What a check reads off the records, fed each of them in turn."""

    def add(self, record: Record) -> None: ...


T = TypeVar("T", bound=Tally)


@dataclass(frozen=True)
class Check(Generic[T]):
    """One check, as its entry in `CHECKS` (keyed by its name) describes it."""

    title: str  # on the console
    tally: Callable[[Run], T]  # made once, whichever entries name it
    verdict: Callable[[T], CheckResult]  # asked after the last record


CHECKS: dict[str, Check[Any]] = {
    request_errors.NAME: Check("endpoint errors", RequestErrors, RequestErrors.result),
    arrival.NAME: Check("intra-session arrival", Arrivals, Arrivals.result),
    root_sessions.CONCURRENCY: Check("session concurrency", Roots, Roots.concurrency),
    root_sessions.RATE: Check("request rate", Roots, Roots.rate),
    output_length.NAME: Check("output length", OutputLengths, OutputLengths.result),
    output_length.EARLY_STOP: Check("early stops", OutputLengths, OutputLengths.early_stops),
}


def run_checks(records: Iterable[Record], run: Run) -> tuple[int, list[CheckResult]]:
    """How many records were read, and every check's verdict on them, in the table's order."""
    tallies: dict[Callable[[Run], Tally], Tally] = {}
    for check in CHECKS.values():
        if check.tally not in tallies:
            tallies[check.tally] = check.tally(run)
    adds = [tally.add for tally in tallies.values()]
    count = 0
    for record in records:
        count += 1
        for add in adds:
            add(record)
    return count, [check.verdict(tallies[check.tally]) for check in CHECKS.values()]


__all__ = [
    "CHECKS",
    "Arrivals",
    "Check",
    "Load",
    "OutputLengths",
    "Record",
    "RequestErrors",
    "Roots",
    "Run",
    "Tally",
    "run_checks",
]
