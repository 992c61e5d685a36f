"""The metrics of one request, computed where it was timed: on the worker that sent it.

Definitions follow AIPerf's: latency from the written request to the last byte; time to first
token to the first output event; time to second token between the first two; inter-chunk
latency between consecutive output events; inter-token latency as the decode time per token
after the first, (latency - TTFT) / (output tokens - 1), and its inverse as per-user throughput.
Output tokens include reasoning tokens, which `reasoning_token_count` counts on their own.

Token counts come from `metrics.tokens`: the server's usage, a local tokenizer, or an estimate;
`request_metrics` says which one it used.
"""

from __future__ import annotations

import itertools
from typing import Any

from dagperf.transport.client import Exchange
from dagperf.vocabulary.tokens import ESTIMATE, TOKENIZER, USAGE, TokenCounter


def request_metrics(ex: Exchange, prompt: str, counter: TokenCounter) -> tuple[dict[str, Any], str]:
    """Metrics of a successful request, and the source of its token counts."""
    start = ex.start_perf
    latency = (ex.end_perf - start) / 1e6
    metrics: dict[str, Any] = {"request_latency": latency}
    usage = ex.reply.usage_counts()
    metrics.update(usage)
    reply = ex.reply
    osl = usage.get("usage_completion_tokens")
    if osl is not None:
        source = USAGE
    elif counter.source == TOKENIZER or not ex.streamed:
        osl = counter.count(reply.text + reply.reasoning_text)
        source = counter.source
    else:
        osl = len(ex.output_perf)  # one token per streamed output event
        source = ESTIMATE
    isl = usage.get("usage_prompt_tokens")
    metrics["output_sequence_length"] = osl
    metrics["input_sequence_length"] = isl if isl is not None else counter.count(prompt)
    if "usage_reasoning_tokens" in usage:
        metrics["reasoning_token_count"] = usage["usage_reasoning_tokens"]
    elif reply.reasoning:
        metrics["reasoning_token_count"] = counter.count(reply.reasoning_text)
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
    return metrics, source


def error_metrics(prompt: str, counter: TokenCounter) -> dict[str, Any]:
    return {"error_isl": counter.count(prompt)}
