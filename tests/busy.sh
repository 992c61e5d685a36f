#!/usr/bin/env bash
# The test command on a busy machine: tests/run.sh (arguments go to pytest) with two processes
# spinning beside it, one per core of a 2-core CI machine, so that every test's waits, timeouts
# and ordering are tried the way a loaded machine tries them: the tests must hold here, or they
# are wrong. CI runs tests/run.sh alone, for its time budget (docs/testing.md).
# `DAGPERF_HOGS=N` sets how many spin (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

hogs=()
trap 'kill "${hogs[@]}" 2> /dev/null || true' EXIT # by PID: only the hogs started here
trap 'exit 130' INT TERM

for _ in $(seq "${DAGPERF_HOGS:-2}"); do
  sh -c 'while :; do :; done' &
  hogs+=("$!")
done
echo "busy: ${#hogs[@]} CPU hogs running beside the suite (pids ${hogs[*]})"

started=$SECONDS
status=0
bash tests/run.sh "$@" || status=$?
echo "busy: suite ended with status $status in $((SECONDS - started)) s"
exit "$status"
