"""The endpoint's failures against the run's --max-error-rate.

The numbers of a run mean something only if the endpoint answered. The failures are judged by
the rules the run's exit code follows (`dagperf.verdict`: a run that measured nothing fails, and
one past the rate names its most common error), so the report says what the exit code said.
Requests the run itself cut short (at its end, or cancelled) are not the endpoint's errors and
are counted apart.
"""

from __future__ import annotations

from typing import Any

from dagperf.health.checks.run import Record, Run
from dagperf.health.report import CheckResult, Status
from dagperf.transport.protocol import CANCELLED
from dagperf.verdict import describe_error, rejection, unmeasured

NAME = "request_errors"


class RequestErrors:
    """Requests answered, failed and cut short, and the failures' most common kinds."""

    def __init__(self, run: Run) -> None:
        self._max_error_rate = run.max_error_rate
        self.ok = self.failed = self.cut = self.unseen = 0
        self._errors: dict[tuple[Any, Any, str], int] = {}

    def add(self, record: Record) -> None:
        meta, error = record.metadata, record.error
        if error is None:
            self.ok += 1
        elif meta.cut is not None or (meta.was_cancelled and error.get("type") == CANCELLED):
            self.cut += 1
            self.unseen += meta.cut is not None and meta.cut.get("first_token") is None
        else:
            self.failed += 1
            key = (error.get("code"), error.get("type"), str(error.get("message"))[:200])
            if key in self._errors or len(self._errors) < 100:
                self._errors[key] = self._errors.get(key, 0) + 1

    def _most_common(self) -> str | None:
        if not self._errors:
            return None
        code, kind, message = max(self._errors, key=self._errors.__getitem__)
        return describe_error(code if isinstance(code, int) else None, str(kind), message)

    def result(self) -> CheckResult:
        max_error_rate = self._max_error_rate
        details = {
            "succeeded": self.ok,
            "failed": self.failed,
            "cut": self.cut,
            "max_error_rate": max_error_rate,
        }
        cut = f"; {self.cut} cut short by the run, not errors" if self.cut else ""
        if (nothing := unmeasured(self.ok, self.failed, self.cut, self.unseen)) is not None:
            return CheckResult(name=NAME, status=Status.FAIL, summary=nothing, details=details)
        if not self.ok + self.failed:
            summary = f"no request was answered or failed{cut}"
            return CheckResult(name=NAME, status=Status.SKIPPED, summary=summary, details=details)
        rejected = rejection(self.ok, self.failed, max_error_rate, self._most_common(), self.cut)
        if rejected is not None:
            return CheckResult(name=NAME, status=Status.FAIL, summary=rejected, details=details)
        total = self.ok + self.failed
        summary = (
            f"{self.failed} of {total} requests failed ({self.failed / total:.1%}), within "
            f"--max-error-rate {max_error_rate:g}{cut}"
        )
        return CheckResult(name=NAME, status=Status.PASS, summary=summary, details=details)
