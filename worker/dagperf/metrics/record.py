"""The metrics of one request, computed where it was timed: on the worker that sent it.

Definitions follow AIPerf's: latency from send to the last byte; time to first token from send
to the first output event; time to second token between the first two; inter-chunk latency
between consecutive output events; inter-token latency as the decode time per token after the
first, (latency - TTFT) / (output tokens - 1), and its inverse as per-user throughput.

Token counts come from the server's `usage` when it reports them; otherwise they are estimated
(one token per output event when streaming, four characters per token otherwise).
"""

from __future__ import annotations

import itertools
from typing import Any

from dagperf.client import Exchange

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)  # ceiling division


def request_metrics(ex: Exchange, prompt_chars: int) -> dict[str, Any]:
    """Metrics of a successful request; `prompt_chars` sizes the prompt when usage is absent."""
    start = ex.start_perf
    latency = (ex.end_perf - start) / 1e6
    metrics: dict[str, Any] = {"request_latency": latency}
    usage = ex.reply.usage_counts()
    metrics.update(usage)
    osl = usage.get("usage_completion_tokens")
    if osl is None:
        if ex.streamed:
            osl = len(ex.output_perf)
        else:
            osl = estimate_tokens(ex.reply.text + ex.reply.reasoning_text)
    isl = usage.get("usage_prompt_tokens")
    metrics["output_sequence_length"] = osl
    metrics["input_sequence_length"] = (
        isl if isl is not None else -(-prompt_chars // CHARS_PER_TOKEN)
    )
    if "usage_reasoning_tokens" in usage:
        metrics["reasoning_token_count"] = usage["usage_reasoning_tokens"]
    stamps = ex.output_perf
    if stamps:
        ttft = (stamps[0] - start) / 1e6
        metrics["time_to_first_token"] = ttft
        if len(stamps) > 1:
            metrics["time_to_second_token"] = (stamps[1] - stamps[0]) / 1e6
            metrics["inter_chunk_latency"] = [(b - a) / 1e6 for a, b in itertools.pairwise(stamps)]
        if osl > 1:
            itl = (latency - ttft) / (osl - 1)
            metrics["inter_token_latency"] = itl
            if itl > 0:
                metrics["output_token_throughput_per_user"] = 1000.0 / itl
    return metrics


def error_metrics(prompt_chars: int) -> dict[str, Any]:
    return {"error_isl": -(-prompt_chars // CHARS_PER_TOKEN)}
