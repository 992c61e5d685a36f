#!/usr/bin/env bash
# Stops the engines and relays up.sh started in DAGPERF_ENGINES_DIR and leaves no process
# behind: each one's process group gets SIGTERM, then SIGKILL after 10 s.
set -uo pipefail

DIR="${DAGPERF_ENGINES_DIR:-${TMPDIR:-/tmp}/dagperf-engines}"
# shellcheck source=/dev/null  # stop
. "$(dirname "$0")/../processes.sh"
[ -d "$DIR" ] || exit 0

stopped=0
for pidfile in "$DIR"/relay-*.pid "$DIR"/engine-*.pid; do
  stop "$pidfile" && stopped=$((stopped + 1))
done
echo "down.sh: stopped $stopped process(es) in $DIR"
