#!/usr/bin/env bash
# One FORK-heavy DAG through each of vLLM Router's policies, over N local llama.cpp servers,
# and the runs side by side: FORK trees kept on one engine, FORK children's prompt-cache reuse,
# TTFT at home against away, the load on each engine. See docs/routing.md.
#
#   examples/routing/compare.sh [OUT]            (default OUT: artifacts/routing)
#
# Engines: tests/engines/up.sh (llama-server built from the llama-cpp-python sdist into
# ~/.cache/dagperf-engines on first use, a tiny random-weight model, and in front of each engine
# a relay that names it in an `x-engine` response header: what a pod-name header does on a
# cluster). Run from the repository with the test extras installed (vllm-router, gguf):
#   python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[test]"
#
#   ENGINES      llama-servers (default 3)
#   SLOTS        request slots per engine, one pass each (default "1 4")
#   POLICIES     vLLM Router policies (default "round_robin cache_aware consistent_hash")
#   CONCURRENCY  root conversations in flight (default 3)
#   DATASET      the DAG (default examples/routing/agent-forks.dag.jsonl)
#   DAGPERF_FLAGS more `dagperf profile` flags, split on spaces (default none)
#   TABLE        the script that prints the runs side by side (default examples/routing/table.py)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="$(mkdir -p "${1:-artifacts/routing}" && cd "${1:-artifacts/routing}" && pwd)"
ENGINES="${ENGINES:-3}"
SLOTS="${SLOTS:-1 4}"
POLICIES="${POLICIES:-round_robin cache_aware consistent_hash}"
CONCURRENCY="${CONCURRENCY:-3}"
DATASET="${DATASET:-$ROOT/examples/routing/agent-forks.dag.jsonl}"
read -r -a flags <<< "${DAGPERF_FLAGS:-}"
command -v vllm-router > /dev/null || { echo "compare.sh: no vllm-router (pip install vllm-router)" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

router_pid=""
engines_dir=""
cleanup() {
  [ -n "$router_pid" ] && kill "$router_pid" 2> /dev/null && wait "$router_pid" 2> /dev/null
  [ -n "$engines_dir" ] && DAGPERF_ENGINES_DIR="$engines_dir" "$ROOT/tests/engines/down.sh" > /dev/null
  return 0
}
trap cleanup EXIT

runs=()
for slots in $SLOTS; do
  for policy in $POLICIES; do
    run="$OUT/np$slots-$policy"
    # Fresh engines for each run: llama-server keeps prompts in host memory (--cache-ram), so an
    # engine that served this DAG before would answer the next run's prompts from its cache.
    engines_dir="$run.engines"
    echo "compare.sh: $policy over $ENGINES llama-servers with $slots slot(s) each -> $run" >&2
    DAGPERF_ENGINES_DIR="$engines_dir" ENGINE_SLOTS="$slots" PYTHON=python3 \
      "$ROOT/tests/engines/up.sh" "$ENGINES" > /dev/null
    mapfile -t relays < "$engines_dir/relay-urls"
    scrape=()
    while read -r url; do scrape+=(--server-metrics-url "$url"); done < "$engines_dir/metrics-urls"

    port=$(free_port)
    vllm-router --host 127.0.0.1 --port "$port" --policy "$policy" --worker-urls "${relays[@]}" \
      --prometheus-host 127.0.0.1 --prometheus-port "$(free_port)" > "$run.router.log" 2>&1 &
    router_pid=$!
    until curl -sf "http://127.0.0.1:$port/health" > /dev/null; do
      kill -0 "$router_pid" 2> /dev/null || { cat "$run.router.log" >&2; exit 1; }
      sleep 0.2
    done
    dagperf profile --input-file "$DATASET" --url "http://127.0.0.1:$port" --streaming \
      --concurrency "$CONCURRENCY" --extra-inputs ignore_eos:true \
      --backend-header x-engine "${scrape[@]}" --artifact-dir "$run" --quiet "${flags[@]}" > "$run.txt"
    # The engines' own counters after the run (they started at zero), for table.py.
    while read -r url; do curl -sf "$url"; done < "$engines_dir/metrics-urls" > "$run.engines.prom"
    kill "$router_pid"
    wait "$router_pid" 2> /dev/null || true
    router_pid=""
    DAGPERF_ENGINES_DIR="$engines_dir" "$ROOT/tests/engines/down.sh" > /dev/null
    engines_dir=""
    runs+=("$run")
  done
done

labels=()
for run in "${runs[@]}"; do labels+=(--label "$(basename "$run")"); done
dagperf report "${runs[@]}" "${labels[@]}" --output "$OUT/report.html" > /dev/null
python3 "${TABLE:-$ROOT/examples/routing/table.py}" "${runs[@]}"
echo "compare.sh: side by side in $OUT/report.html" >&2
