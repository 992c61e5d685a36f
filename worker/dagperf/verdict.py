"""Whether a run passes, and the exit code that says so.

A run whose requests failed measured the failure more than the service, and the latencies of
the requests that did succeed are those of a server shedding load; exiting 0 would let a CI
pipeline record it as a benchmark. The endpoint fails the run when every request failed, or
when its error rate passes `--max-error-rate`.

The error rate is the endpoint's: its failures over the requests it answered or failed.
Requests the run cut short itself (its duration's grace period, a stop, an interrupt) are
neither: they are censored observations (`dagperf.metrics.censored`), counted apart.

The default ceiling, 5%, is a guard, not an objective: one request in twenty failing means the
figures describe a server in trouble. An objective is stricter and your own (k6's documented
example is `http_req_failed: rate<0.01`; `--max-error-rate 0.01` is the same, and
`dagperf search --slo error_rate:max:0.01` judges it per step); 1.0 fails only a run where every
request failed.
"""

from __future__ import annotations

from enum import StrEnum

OK = 0
RUN_FAILED = 1  # the run itself failed: a fault, lost workers, an internal error
USAGE = 2  # bad flags or input; argparse's own code
ENDPOINT_FAILED = 3  # every request failed, or more than --max-error-rate of them
SLO_NOT_MET = 4  # a search: no load tried met every objective
SIGNALLED = 130  # stopped by SIGINT or SIGTERM, exports written

DEFAULT_MAX_ERROR_RATE = 0.05


class Verdict(StrEnum):
    """An objective's, or a search step's (`dagperf.metrics.censored`)."""

    MEETS = "meets"
    MISSES = "misses"
    UNDECIDED = "undecided"  # too little measured, or too much of it censored, to say


def rejection(
    ok: int, failed: int, max_error_rate: float, most_common: str | None = None, cut: int = 0
) -> str | None:
    """Why the endpoint failed the run, or None when it did not: `failed` of `ok + failed`
    requests were its failures (`most_common` describes the most frequent); `cut` more were
    cut short by the run, which fails nothing."""
    if failed == 0:
        return None
    example = f"; most often {most_common}" if most_common else ""
    if ok == 0:
        tail = f", {cut:,} cut short by the run" if cut else ""
        return f"every request failed ({failed:,}{tail}){example}"
    total = ok + failed
    if failed / total > max_error_rate:
        return (
            f"{failed:,} of {total:,} requests failed ({failed / total:.1%}), more than "
            f"--max-error-rate {max_error_rate:g} allows{example}"
        )
    return None


def unmeasured(ok: int, failed: int, cut: int, unseen: int) -> str | None:
    """Why a run measured nothing at all, when it did not: no request answered or failed, and
    nothing was seen of those the run cut short (`unseen`: lost with their worker, or never
    heard of after a cancel). Not the endpoint's failure, but no result either: the run fails.
    (A request cut while it waited still says its wait was at least that long.)"""
    if ok or failed or not cut or unseen < cut:
        return None
    return (
        f"nothing was measured: all {cut:,} requests were lost by the run (with their worker, "
        "or never heard of after a cancel)"
    )


def describe_error(code: int | None, kind: str, message: str) -> str:
    """An error in one line: its type, code and the start of its message."""
    shown = "" if code is None else f" {code}"
    return f"{kind}{shown}: {message[:200]}"
