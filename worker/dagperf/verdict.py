"""Whether a run passes, and the exit code that says so.

A run whose requests all failed measured nothing but the failure; exiting 0 would let a CI
pipeline record it as a benchmark. The endpoint fails the run when every request failed, or when
the error rate passes `--max-error-rate` (a fraction; 1.0, the default, means total failure only).
"""

from __future__ import annotations

from collections import Counter

from dagperf.transport.protocol import CANCELLED, ErrorInfo

OK = 0
RUN_FAILED = 1  # the run itself failed: a fault, lost workers, an internal error
USAGE = 2  # bad flags or input; argparse's own code
ENDPOINT_FAILED = 3  # every request failed, or more than --max-error-rate of them
SLO_NOT_MET = 4  # a search: no load tried met every objective
SIGNALLED = 130  # stopped by SIGINT or SIGTERM, exports written


def rejection(ok: int, errors: Counter[ErrorInfo], max_error_rate: float) -> str | None:
    """Why the endpoint failed the run, or None when it did not. Requests the run cut short
    itself (its duration, a fail-fast, a stop) are neither successes nor the endpoint's failures."""
    failures = Counter({error: n for error, n in errors.items() if error.type != CANCELLED})
    failed = failures.total()
    if failed == 0:
        return None
    ((most_common, _),) = failures.most_common(1)
    example = f"; most often {_describe(most_common)}"
    if ok == 0:
        cancelled = errors.total() - failed
        tail = f", {cancelled:,} cut short by the run's end" if cancelled else ""
        return f"every request failed ({failed:,}{tail}){example}"
    total = ok + failed
    if failed / total > max_error_rate:
        return (
            f"{failed:,} of {total:,} requests failed ({failed / total:.1%}), more than "
            f"--max-error-rate {max_error_rate:g} allows{example}"
        )
    return None


def _describe(error: ErrorInfo) -> str:
    code = "" if error.code is None else f" {error.code}"
    return f"{error.type}{code}: {error.message[:200]}"
