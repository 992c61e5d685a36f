"""Output length: replies as long as they were asked to be, where the run asked for an exact
length, and, apart, replies that stopped by themselves before their limit. Both read one tally
of the successful replies sent with a positive `max_tokens`.

A dataset's output lengths are part of the load: a server that writes shorter or longer replies
than asked serves a different benchmark. Only where the length was meant to be exact is a miss a
failure (`ignore_eos`, or a reply that reached its limit); an early stop is the model's choice,
reported as a warning so that the lengths behind the figures are known to be the model's.
A failure says how many of its replies were counted by estimate (no --tokenizer given), since
the estimate may be what missed.
"""

from __future__ import annotations

from typing import Any

from dagperf.apis.reply import LENGTH, STOP
from dagperf.health.checks.figures import Worst, distribution
from dagperf.health.checks.run import Metadata, Record, Run
from dagperf.health.report import CheckResult, Status
from dagperf.metrics.summary import Distribution

NAME, EARLY_STOP = "output_length", "early_stop"


class OutputLengths:
    """Successful replies against the `max_tokens` they were sent with.

    A reply sent with `ignore_eos` must be that long. So must one that ended at its limit
    (`finish_reason` "length"): the server's own count of what it generated, which is how a
    server that refuses `ignore_eos` (transformers serve answers 422) is checked. A reply that
    ended by itself before the limit (`finish_reason` "stop") is an early stop: not the
    server's error, but its length is the model's, not the dataset's, which is a finding of its
    own (`early_stops`)."""

    def __init__(self, run: Run) -> None:
        self._options = run.options
        self._checked = self._short = self._long = self._estimated = 0
        self._by_kind = {"ignore_eos": 0, "length": 0}
        self._worst = Worst()
        self._early = 0
        self._ended = 0  # replies with max_tokens whose finish reason was given
        self._early_share = Distribution()  # an early stop's length over its max_tokens
        self._shortest = Worst()

    def add(self, record: Record) -> None:
        meta = record.metadata
        if record.error is not None or meta.was_cancelled or meta.cut is not None:
            return
        asked = meta.max_tokens
        if isinstance(asked, bool) or not isinstance(asked, int | float) or asked <= 0:
            return
        found = record.metrics.output_sequence_length if record.metrics else None
        osl = found.value if found else None
        self._ended += meta.finish_reason is not None
        if meta.ignore_eos or meta.finish_reason == LENGTH:
            self._judge(meta, asked, osl, "ignore_eos" if meta.ignore_eos else "length")
        elif meta.finish_reason == STOP and (osl is None or osl < asked):
            self._early += 1
            share = 0.0 if osl is None else osl / asked
            self._early_share.add(share)
            entry = {"request_id": meta.x_request_id, "max_tokens": asked, "output_tokens": osl}
            self._shortest.add(1 - share, entry)

    def _judge(self, meta: Metadata, asked: float, osl: float | None, kind: str) -> None:
        self._checked += 1
        self._by_kind[kind] += 1
        if osl is not None and abs(osl - asked) <= self._options.osl_allowance(asked):
            return
        if osl is None or osl < asked:
            self._short += 1
        else:
            self._long += 1
        self._estimated += meta.token_count_source == "estimate"
        miss = asked if osl is None else abs(osl - asked)
        entry = {"request_id": meta.x_request_id, "max_tokens": asked, "output_tokens": osl}
        self._worst.add(miss, entry | {"why": kind})

    def result(self) -> CheckResult:
        options = self._options
        failed = self._short + self._long
        details: dict[str, Any] = {
            "checked": self._checked,
            "ignore_eos": self._by_kind["ignore_eos"],
            "ended_at_max_tokens": self._by_kind["length"],
            "failed": failed,
            "short": self._short,
            "long": self._long,
            "failed_with_estimated_counts": self._estimated,
            "tolerance_pct": options.osl_tolerance_pct,
            "tolerance_max_tokens": options.osl_tolerance_max_tokens,
            "worst": self._worst.listed(),
        }
        if not self._checked:
            summary = (
                "no successful reply with max_tokens was sent with ignore_eos or ended at its "
                "limit (finish_reason length)"
            )
            return CheckResult(name=NAME, status=Status.SKIPPED, summary=summary, details=details)
        tolerance = (
            f"min({options.osl_tolerance_pct:g}%, {options.osl_tolerance_max_tokens}) tokens"
        )
        which = " and ".join(
            f"{n} {label}"
            for n, label in (
                (self._by_kind["ignore_eos"], "ignore_eos"),
                (self._by_kind["length"], "ended at the limit"),
            )
            if n
        )
        if failed:
            worst = details["worst"][0]
            got = "no" if worst["output_tokens"] is None else f"{worst['output_tokens']:g}"
            estimated = (
                f"; {self._estimated} counted by estimate (give --tokenizer)"
                if self._estimated
                else ""
            )
            summary = (
                f"{failed} of {self._checked} replies ({which}) off max_tokens by more than "
                f"{tolerance} ({self._short} short, {self._long} long); worst "
                f"{worst['request_id']}: {got} tokens for {worst['max_tokens']:g}{estimated}"
            )
            status = Status.FAIL
        else:
            summary = f"{self._checked} replies ({which}) within {tolerance} of max_tokens"
            status = Status.PASS
        return CheckResult(name=NAME, status=status, summary=summary, details=details)

    def early_stops(self) -> CheckResult:
        """Replies that ended by themselves before max_tokens: a warning, not a failure."""
        details: dict[str, Any] = {
            "replies_with_finish_reason": self._ended,
            "early_stops": self._early,
            "share_of_max_tokens": distribution(self._early_share),
            "shortest": self._shortest.listed(),
        }
        if not self._ended:
            summary = "no successful reply with max_tokens said why it ended (finish_reason)"
            return CheckResult(
                name=EARLY_STOP, status=Status.SKIPPED, summary=summary, details=details
            )
        if not self._early:
            summary = f"none of {self._ended} replies ended before max_tokens by itself"
            return CheckResult(
                name=EARLY_STOP, status=Status.PASS, summary=summary, details=details
            )
        share = details["share_of_max_tokens"]
        summary = (
            f"{self._early} of {self._ended} replies ended by themselves (finish_reason stop) "
            f"before max_tokens, at a median {share['p50']:.0%} of it: their lengths are the "
            "model's, not the dataset's (ignore_eos, or a model without an end-of-sequence "
            "token, gives exact lengths)"
        )
        return CheckResult(name=EARLY_STOP, status=Status.WARN, summary=summary, details=details)
