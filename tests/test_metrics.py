"""Per-request metrics and the phase summary: definitions, exact statistics, bounded memory."""

from __future__ import annotations

import numpy as np
import pytest

from dagperf.apis.choices import ChoicesReply
from dagperf.metrics import summary as summary_module
from dagperf.metrics.record import request_metrics
from dagperf.metrics.summary import Distribution, PhaseSummary
from dagperf.transport.client import Exchange
from dagperf.transport.protocol import ErrorInfo, Result
from dagperf.vocabulary.catalog import PERCENTILES
from dagperf.vocabulary.tokens import TokenCounter, TokenizerError, read_tokenizer

MS = 1_000_000


def exchange(stamps_ms: list[float], end_ms: float, usage: bytes | None = None) -> Exchange:
    ex = Exchange(start_perf=0, end_perf=int(end_ms * MS), streamed=True)
    ex.output_perf = [int(t * MS) for t in stamps_ms]
    if usage:
        ex.reply = ChoicesReply()
        ex.reply.add_chunk(usage)
    return ex


def test_streaming_metrics_follow_aiperf_definitions():
    usage = b'{"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":5}}'
    ex = exchange([10, 12, 12, 15, 18], 18, usage)
    metrics, source = request_metrics(ex, "x" * 400, TokenCounter())
    assert source == "usage"
    assert metrics["time_to_first_token"] == 10
    assert metrics["time_to_second_token"] == 2
    assert metrics["inter_chunk_latency"] == [2, 0, 3, 3]
    assert metrics["request_latency"] == 18
    assert metrics["inter_token_latency"] == pytest.approx((18 - 10) / 4)
    assert metrics["output_token_throughput_per_user"] == pytest.approx(1000 / 2)
    assert (metrics["output_sequence_length"], metrics["input_sequence_length"]) == (5, 20)


def test_without_usage_tokens_are_estimated():
    metrics, source = request_metrics(exchange([5, 6, 7], 7), "x" * 41, TokenCounter())
    assert source == "estimate"
    assert metrics["output_sequence_length"] == 3  # one per output event
    assert metrics["input_sequence_length"] == 11  # ceil(41 / 4)


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory):
    """A word-level tokenizer built here: nothing is downloaded."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "hello": 1, "world": 2, "again": 3}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def test_a_local_tokenizer_counts_what_usage_does_not(tokenizer_json):
    ex = exchange([5, 6], 6)
    ex.reply.content = ["hello world ", "again"]
    for given in (tokenizer_json, tokenizer_json.parent):  # the file or its directory
        counter = TokenCounter(read_tokenizer(given))
        metrics, source = request_metrics(ex, "hello hello world", counter)
        assert source == "tokenizer"
        assert (metrics["output_sequence_length"], metrics["input_sequence_length"]) == (3, 3)


def test_a_tokenizer_must_be_a_local_file(tmp_path):
    with pytest.raises(TokenizerError, match="never downloads"):
        read_tokenizer("Qwen/Qwen3-0.6B")
    (tmp_path / "tokenizer.json").write_text("{not a tokenizer")
    with pytest.raises(TokenizerError, match="cannot load the tokenizer"):
        read_tokenizer(tmp_path)


def test_goodput_counts_requests_within_every_objective():
    s = PhaseSummary(goodput={"time_to_first_token": 50, "output_token_throughput_per_user": 100})
    for ttft, tput in ((40, 150), (60, 150), (40, 90), (50, 100)):
        s.add(
            Result(
                ttft,
                0,
                None,
                10**9,
                {"time_to_first_token": ttft, "output_token_throughput_per_user": tput},
            )
        )
    s.add(Result(9, 0, None, 10**9, {"request_latency": 1}))  # TTFT not measured: not good
    aggregates = s.aggregates()
    assert aggregates["good_request_count"] == 2
    assert aggregates["goodput"] == pytest.approx(2.0)


def test_exact_statistics_match_numpy():
    rng = np.random.default_rng(3)
    values = rng.gamma(2.0, 10.0, size=5000)
    d = Distribution()
    for v in values:
        d.add(float(v))
    stats = d.stats()
    assert stats["avg"] == pytest.approx(values.mean())
    assert stats["std"] == pytest.approx(values.std())  # population, as AIPerf
    assert (stats["min"], stats["max"], stats["count"]) == (values.min(), values.max(), 5000)
    for p in PERCENTILES:
        assert stats[f"p{p}"] == pytest.approx(np.percentile(values, p))


def test_past_the_exact_limit_memory_stops_growing_and_percentiles_stay_close(monkeypatch):
    monkeypatch.setattr(summary_module, "EXACT_LIMIT", 1000)
    rng = np.random.default_rng(5)
    values = np.concatenate(
        [rng.lognormal(3, 0.5, 200_000), -rng.uniform(1, 2, 1000), np.zeros(500)]
    )
    rng.shuffle(values)
    d = Distribution()
    for v in values:
        d.add(float(v))
    assert d._exact is None and len(d._buckets) < 10_000
    stats = d.stats()
    for p in PERCENTILES:
        assert stats[f"p{p}"] == pytest.approx(np.percentile(values, p), rel=2e-3, abs=1e-9)
    assert stats["avg"] == pytest.approx(values.mean())
    assert stats["std"] == pytest.approx(values.std())


def test_a_phase_summary_appending_straight_to_its_arrays_stays_bounded_and_exact(monkeypatch):
    monkeypatch.setattr(summary_module, "EXACT_LIMIT", 1000)
    rng = np.random.default_rng(7)
    latencies, chunks = rng.lognormal(3, 0.5, 20_000), rng.lognormal(1, 0.3, (20_000, 3))
    s = PhaseSummary()
    most_waiting = 0
    for i, (latency, gaps) in enumerate(zip(latencies, chunks, strict=True)):
        metrics = {"request_latency": float(latency), "inter_chunk_latency": gaps.tolist()}
        s.add(Result(i, 0, None, 1, metrics | {"output_sequence_length": 16}))
        most_waiting = max(most_waiting, len(s.distributions["inter_chunk_latency"]._values))
    # Never more waiting than one fold's worth and what a settling interval brings.
    assert most_waiting <= summary_module.FOLD_EVERY + 3 * summary_module.SETTLE_EVERY
    stats = s.metric_stats()
    assert stats["inter_chunk_latency"]["count"] == 60_000
    assert stats["output_sequence_length"]["max"] == 16  # ints stay ints
    assert isinstance(stats["output_sequence_length"]["max"], int)
    for name, values in (("request_latency", latencies), ("inter_chunk_latency", chunks)):
        assert stats[name]["avg"] == pytest.approx(values.mean())
        assert stats[name]["p90"] == pytest.approx(np.percentile(values, 90), rel=2e-3)


def test_phase_summary_aggregates():
    s = PhaseSummary()
    ok = {
        "request_latency": 100.0,
        "output_sequence_length": 10,
        "input_sequence_length": 4,
        "inter_chunk_latency": [1.0, 2.0],
    }
    s.add(Result(1, 0, None, 2 * 10**9, ok))
    s.add(Result(2, 10**9, None, 3 * 10**9, ok))
    s.add(Result(3, 10**9, None, 2 * 10**9, {"error_isl": 4}, ErrorInfo(500, "X", "boom")))
    aggregates = s.aggregates()
    assert aggregates["benchmark_duration"] == 3.0
    assert aggregates["request_throughput"] == pytest.approx(2 / 3)
    assert aggregates["output_token_throughput"] == pytest.approx(20 / 3)
    assert aggregates["request_error_rate"] == pytest.approx(100 / 3)
    stats = s.metric_stats()
    assert stats["inter_chunk_latency"]["count"] == 4  # list metrics aggregate every element
    assert stats["request_latency"]["unit"] == "ms"
    assert s.error_summary() == [
        {"error_details": {"code": 500, "type": "X", "message": "boom"}, "count": 1}
    ]


def test_error_kinds_are_bounded():
    s = PhaseSummary()
    for i in range(500):
        s.add(Result(i, 0, None, 1, {}, ErrorInfo(499, "RequestCancellationError", f"after {i} s")))
    assert len(s.errors) == summary_module.MAX_ERROR_KINDS + 1
    assert s.error_count == 500
