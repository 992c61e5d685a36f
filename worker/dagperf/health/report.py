"""What the health checks produce: their options, each check's verdict, the report.

Pydantic models, so `HealthOptions` can generate CLI flags the way `LoadConfig` does and
`health_check.json` has one definition. The checks' names and console titles are in
`dagperf.health.checks.CHECKS`; this module imports none of it, since the operator imports this
one (for `HealthOptions`) and the checks bring the metrics and numpy.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


class HealthError(Exception):
    """The artifacts cannot be checked; the message names the file (and line) at fault."""


class HealthOptions(BaseModel):
    """Tolerances of the checks; flat, so CLI flags can be generated from it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arrival_slack_ms: float = Field(
        default=50.0,
        ge=0,
        description="Most a request may go out after its dependencies finished and its delay "
        "elapsed.",
    )
    early_tolerance_ms: float = Field(
        default=0.0,
        ge=0,
        description="Clock offset forgiven before a request counts as sent early: 0 when the "
        "workers share a host, their clock skew when they do not.",
    )
    rate_tolerance: float = Field(
        default=0.10,
        gt=0,
        description="Largest relative gap between the measured and the requested root rate.",
    )
    osl_tolerance_pct: float = Field(
        default=5.0,
        ge=0,
        description="An ignore_eos reply, or one that ended at its limit (finish_reason "
        "length), may miss max_tokens by this percentage of it, capped by "
        "osl_tolerance_max_tokens; an exact match always passes.",
    )
    osl_tolerance_max_tokens: int = Field(
        default=50, ge=0, description="Cap, in tokens, on the output-length tolerance."
    )

    def osl_allowance(self, max_tokens: float) -> float:
        """Tokens an ignore_eos reply may miss `max_tokens` by (AIPerf: min(5%, 50))."""
        return min(max_tokens * self.osl_tolerance_pct / 100, self.osl_tolerance_max_tokens)


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"  # a finding worth reading that does not fail the run
    SKIPPED = "skipped"


class CheckResult(BaseModel):
    """One check's verdict."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Stable identifier, e.g. `intra_session_arrival`.")
    status: Status = Field(
        description="pass, fail, warn (a finding that fails nothing), or skipped (with the "
        "reason as summary)."
    )
    summary: str = Field(description="One line for the console.")
    details: dict[str, Any] = Field(
        default_factory=dict, description="The figures behind the verdict."
    )


class HealthReport(BaseModel):
    """Every check of one artifact directory; written as `health_check.json`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    artifact_dir: str = Field(description="The directory checked.")
    records: int = Field(description="Records read from profile_export.jsonl.")
    options: HealthOptions = Field(description="The tolerances used.")
    checks: list[CheckResult] = Field(description="In a fixed order.")

    @property
    def passed(self) -> bool:
        """No check failed (a skipped check does not fail the run)."""
        return all(check.status is not Status.FAIL for check in self.checks)

    def check(self, name: str) -> CheckResult:
        return next(check for check in self.checks if check.name == name)

    def to_json(self) -> dict[str, Any]:
        """The health_check.json document, as JSON-ready data."""
        return {
            "schema_version": SCHEMA_VERSION,
            "passed": self.passed,
            **self.model_dump(mode="json"),
        }
