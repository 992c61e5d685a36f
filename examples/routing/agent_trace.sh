#!/usr/bin/env bash
# A coding-agent trace (synthetic sessions in Weka's format: a main agent, its sub-agents,
# side calls) through each of vLLM Router's policies over local llama.cpp servers, and the runs
# side by side: where the sub-agents went, what the main agent and the sub-agents found cached.
# See docs/routing.md#a-coding-agent-trace.
#
#   examples/routing/agent_trace.sh [OUT]        (default OUT: artifacts/routing-agents)
#
# The sessions come from bench/agent_traces.py (small enough for the tiny model's context);
# their prompts are built in the engine's own tokens (examples/routing/char_tokenizer.py).
# compare.sh starts the engines and the router for each policy; SESSIONS, SEED, CONCURRENCY
# and POLICIES change what runs.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="$(mkdir -p "${1:-artifacts/routing-agents}" && cd "${1:-artifacts/routing-agents}" && pwd)"
rm -rf "$OUT/traces"
python3 "$ROOT/bench/agent_traces.py" "$OUT/traces" --sessions "${SESSIONS:-6}" \
  --seed "${SEED:-11}" --turns 6 10 --scale 0.03 --time-scale 0.01 >&2
python3 "$ROOT/examples/routing/char_tokenizer.py" "$OUT/tokenizer.json"
DATASET="$OUT/traces" SLOTS=1 CONCURRENCY="${CONCURRENCY:-2}" \
  DAGPERF_FLAGS="--custom-dataset-type weka_trace --tokenizer $OUT/tokenizer.json" \
  TABLE="$ROOT/examples/routing/agent_table.py" "$ROOT/examples/routing/compare.sh" "$OUT"
