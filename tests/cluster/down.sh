#!/usr/bin/env bash
# Stops the control plane up.sh started in DAGPERF_CLUSTER_DIR and leaves no process behind:
# each component's process group gets SIGTERM, then SIGKILL after 10 s.
set -uo pipefail

DIR="${DAGPERF_CLUSTER_DIR:-${TMPDIR:-/tmp}/dagperf-cluster}"
[ -d "$DIR" ] || exit 0

alive() { # a process that has exited is gone, even while its parent has not reaped it
  local state
  state="$(sed 's/.*) //' "/proc/$1/stat" 2> /dev/null | cut -d' ' -f1)"
  [ -n "$state" ] && [ "$state" != Z ]
}

for name in kube-controller-manager kube-apiserver etcd; do
  pidfile="$DIR/$name.pid"
  [ -f "$pidfile" ] || continue
  pid="$(cat "$pidfile")"
  if alive "$pid"; then
    kill -TERM -- "-$pid" 2> /dev/null || kill -TERM "$pid" 2> /dev/null
    for _ in $(seq 1 100); do
      alive "$pid" || break
      sleep 0.1
    done
    alive "$pid" && { kill -KILL -- "-$pid" 2> /dev/null || kill -KILL "$pid" 2> /dev/null; }
  fi
  rm -f "$pidfile"
done
echo "down.sh: stopped the control plane in $DIR"
