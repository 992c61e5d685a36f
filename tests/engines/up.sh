#!/usr/bin/env bash
# Starts N llama.cpp llama-servers on loopback (built by build.sh), each serving a tiny
# random-weight llama (tiny_llama.py, written here unless DAGPERF_ENGINE_MODEL names a GGUF)
# with Prometheus metrics on, and in front of each a relay (relay.py) that names its engine in
# an `x-engine` response header and logs every request: the ground truth of which engine served
# what, behind a router that says nothing of it. Waits until every engine answers /health.
#
#   up.sh N [LLAMA_SERVER_FLAG...]     extra flags go to every llama-server
#
# Prints DIR as its last line of stdout; in it:
#   engine-urls   one engine base URL per line (http://127.0.0.1:PORT)
#   relay-urls    the relay in front of each, in the same order (what a router points at)
#   metrics-urls  each engine's /metrics
#   engine-N.requests.jsonl  relay N's log; engine-N.log, relay-N.log  their output
# down.sh stops them all.
#
#   DAGPERF_ENGINES_DIR  state: the model, logs, pid files (default below)
#   ENGINE_SLOTS         request slots per engine, llama-server's -np (default 1)
#   ENGINE_CONTEXT       context per slot in tokens (default 4096)
#   ENGINE_THREADS       threads per engine (default 1)
#   DAGPERF_ENGINE_MODEL a GGUF to serve instead of the tiny model
#   PYTHON               the Python with the test extras (gguf, aiohttp) (default: python3)
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null  # start, wait_ready
. "$HERE/../processes.sh"
DIR="${DAGPERF_ENGINES_DIR:-${TMPDIR:-/tmp}/dagperf-engines}"
COUNT="${1:?usage: up.sh N [LLAMA_SERVER_FLAG...]}"
shift
SLOTS="${ENGINE_SLOTS:-1}"
CONTEXT="${ENGINE_CONTEXT:-4096}"
THREADS="${ENGINE_THREADS:-1}"
PYTHON="${PYTHON:-python3}"
case "$PYTHON" in  # a path that still holds after the cd below (a venv's python stays itself)
  /*) ;;
  */*) PYTHON="$PWD/$PYTHON" ;;
  *) PYTHON="$(command -v "$PYTHON" || echo "$PYTHON")" ;;
esac
[[ "$COUNT" =~ ^[1-9][0-9]*$ ]] || { echo "up.sh: N must be a positive number, not '$COUNT'" >&2; exit 2; }
"$PYTHON" -c 'import aiohttp, gguf' 2> /dev/null \
  || { echo "up.sh: $PYTHON lacks aiohttp or gguf (pip install -e \".[test]\", or set PYTHON)" >&2; exit 1; }
BIN="$("$HERE/build.sh" | tail -1)"

"$HERE/down.sh" > /dev/null  # engines left behind in this directory go first
trap '[ $? -eq 0 ] || "$HERE/down.sh" > /dev/null' EXIT  # none left behind by a failed start
mkdir -p "$DIR"
chmod 700 "$DIR"
cd "$DIR"
rm -f ./*.log ./*.requests.jsonl engine-urls relay-urls metrics-urls

MODEL="${DAGPERF_ENGINE_MODEL:-$DIR/tiny-llama.gguf}"
[ -f "$MODEL" ] || "$PYTHON" "$HERE/tiny_llama.py" "$MODEL" > /dev/null

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

for i in $(seq 0 $((COUNT - 1))); do
  engine_port=$(free_port)
  relay_port=$(free_port)
  # Each slot gets CONTEXT tokens; the prompt cache stays on (llama-server's default).
  start "engine-$i" "$BIN/llama-server" --model "$MODEL" --alias tiny-llama \
    --host 127.0.0.1 --port "$engine_port" --metrics --no-webui --no-warmup \
    --parallel "$SLOTS" --ctx-size $((CONTEXT * SLOTS)) \
    --threads "$THREADS" --threads-batch "$THREADS" "$@"
  start "relay-$i" "$PYTHON" "$HERE/relay.py" --port "$relay_port" \
    --target "http://127.0.0.1:$engine_port" --name "engine-$i" --log "engine-$i.requests.jsonl"
  echo "http://127.0.0.1:$engine_port" >> engine-urls
  echo "http://127.0.0.1:$relay_port" >> relay-urls
  echo "http://127.0.0.1:$engine_port/metrics" >> metrics-urls
done
i=0
while read -r url; do
  wait_ready "engine-$i" curl -sf "$url/health"
  wait_ready "relay-$i" curl -sf "$(sed -n "$((i + 1))p" relay-urls)/health"
  i=$((i + 1))
done < engine-urls

echo "$DIR"
