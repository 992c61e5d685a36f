"""AIPerf 0.13's flat traces, with AIPerf itself as the reference: each example runs in both
tools against the same recording simulator. Where the trace holds its text (SageMaker captures,
inputs.json, Baseten prompts), the bodies are the same; where the prompts are synthesised
(Bailian, BurstGPT), the structure is: the requests in order, each one's limit, roles, live
replies and length in words, and which requests share how many leading blocks."""

from __future__ import annotations

from pathlib import Path

import pytest

import aiperf_reference as reference

pytestmark = pytest.mark.aiperf

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
WRITTEN = {  # the example: its type, endpoint and conversations (both tools run them all once)
    "sagemaker_data_capture": (EXAMPLES / "traces" / "sagemaker_data_capture", "chat", 4),
    "inputs_json": (EXAMPLES / "aiperf" / "inputs.json", "chat", 2),
    "baseten_trace": (EXAMPLES / "traces" / "baseten.parquet", "completions", 3),
}
SYNTHESISED = {  # the same, and the block the prompts are built of, in words
    "bailian_trace": (EXAMPLES / "traces" / "bailian.jsonl", "chat", 4, 16),
    "burst_gpt_trace": (EXAMPLES / "traces" / "burst_gpt.csv", "chat", 5, 16),
}


async def runs(kind: str, data: Path, endpoint: str, count: int, out: Path):
    flags = ("--concurrency", "1", "--num-conversations", str(count))
    theirs = await reference.aiperf(data, kind, *flags, endpoint=endpoint)
    ours = await reference.dagperf(data, kind, out, *flags, "--endpoint-type", endpoint)
    assert ours.returncode == 0, ours.log[-3000:]
    return theirs, ours


@pytest.mark.parametrize("kind", sorted(WRITTEN))
async def test_a_written_trace_sends_what_aiperf_sends(kind, tmp_path):
    data, endpoint, count = WRITTEN[kind]
    theirs, ours = await runs(kind, data, endpoint, count, tmp_path)
    assert ours.bodies() == theirs.bodies()


@pytest.mark.parametrize("kind", sorted(SYNTHESISED))
async def test_a_synthesised_trace_has_aiperfs_structure(kind, tmp_path):
    data, endpoint, count, block = SYNTHESISED[kind]
    theirs, ours = await runs(kind, data, endpoint, count, tmp_path)
    assert [reference.shape(b) for b in ours.bodies()] == [
        reference.shape(b) for b in theirs.bodies()
    ]
    assert reference.shared_blocks(ours, block) == reference.shared_blocks(theirs, block)
