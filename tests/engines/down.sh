#!/usr/bin/env bash
# Stops the engines and relays up.sh started in DAGPERF_ENGINES_DIR and leaves no process
# behind: each one's process group gets SIGTERM, then SIGKILL after 10 s.
set -uo pipefail

DIR="${DAGPERF_ENGINES_DIR:-${TMPDIR:-/tmp}/dagperf-engines}"
[ -d "$DIR" ] || exit 0

alive() { # a process that has exited is gone, even while its parent has not reaped it
  local state
  state="$(sed 's/.*) //' "/proc/$1/stat" 2> /dev/null | cut -d' ' -f1)"
  [ -n "$state" ] && [ "$state" != Z ]
}

stopped=0
for pidfile in "$DIR"/relay-*.pid "$DIR"/engine-*.pid; do
  [ -f "$pidfile" ] || continue
  pid="$(cat "$pidfile")"
  if alive "$pid"; then
    kill -TERM -- "-$pid" 2> /dev/null || kill -TERM "$pid" 2> /dev/null
    for _ in $(seq 1 100); do
      alive "$pid" || break
      sleep 0.1
    done
    alive "$pid" && { kill -KILL -- "-$pid" 2> /dev/null || kill -KILL "$pid" 2> /dev/null; }
    stopped=$((stopped + 1))
  fi
  rm -f "$pidfile"
done
echo "down.sh: stopped $stopped process(es) in $DIR"
