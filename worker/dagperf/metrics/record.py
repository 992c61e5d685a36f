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
from dagperf.vocabulary import catalog
from dagperf.vocabulary.tokens import ESTIMATE, TOKENIZER, USAGE, TokenCounter


def request_metrics(ex: Exchange, prompt: str, counter: TokenCounter) -> tuple[dict[str, Any], str]:
    """Metrics of a successful request, and the source of its token counts."""
    start = ex.start_perf
    latency = (ex.end_perf - start) / 1e6
    metrics: dict[str, Any] = {catalog.REQUEST_LATENCY.name: latency}
    usage = ex.reply.usage_counts()
    metrics.update(usage)
    reply = ex.reply
    osl = usage.get(catalog.USAGE_COMPLETION_TOKENS.name)
    if osl is not None:
        source = USAGE
    elif counter.source == TOKENIZER or not ex.streamed:
        osl = counter.count(reply.text + reply.reasoning_text)
        source = counter.source
    else:
        osl = len(ex.output_perf)  # one token per streamed output event
        source = ESTIMATE
    isl = usage.get(catalog.USAGE_PROMPT_TOKENS.name)
    metrics[catalog.OUTPUT_SEQUENCE_LENGTH.name] = osl
    metrics[catalog.INPUT_SEQUENCE_LENGTH.name] = isl if isl is not None else counter.count(prompt)
    reasoning = usage.get(catalog.USAGE_REASONING_TOKENS.name)
    if reasoning is not None:
        metrics[catalog.REASONING_TOKEN_COUNT.name] = reasoning
    elif reply.reasoning:
        metrics[catalog.REASONING_TOKEN_COUNT.name] = counter.count(reply.reasoning_text)
    stamps = ex.output_perf
    if stamps:
        ttft = (stamps[0] - start) / 1e6
        metrics[catalog.TIME_TO_FIRST_TOKEN.name] = ttft
        if len(stamps) > 1:
            metrics[catalog.TIME_TO_SECOND_TOKEN.name] = (stamps[1] - stamps[0]) / 1e6
            metrics[catalog.INTER_CHUNK_LATENCY.name] = [
                (b - a) / 1e6 for a, b in itertools.pairwise(stamps)
            ]
        if osl > 1:
            itl = (latency - ttft) / (osl - 1)
            metrics[catalog.INTER_TOKEN_LATENCY.name] = itl
            if itl > 0:
                metrics[catalog.OUTPUT_TOKEN_THROUGHPUT_PER_USER.name] = 1000.0 / itl
    return metrics, source


def error_metrics(prompt: str, counter: TokenCounter) -> dict[str, Any]:
    return {catalog.ERROR_ISL.name: counter.count(prompt)}
