#!/usr/bin/env bash
# Stops the control plane up.sh started in DAGPERF_CLUSTER_DIR and leaves no process behind:
# each component's process group gets SIGTERM, then SIGKILL after 10 s.
set -uo pipefail

DIR="${DAGPERF_CLUSTER_DIR:-${TMPDIR:-/tmp}/dagperf-cluster}"
# shellcheck source=/dev/null  # stop
. "$(dirname "$0")/../processes.sh"
[ -d "$DIR" ] || exit 0

for name in kube-controller-manager kube-apiserver etcd; do
  stop "$DIR/$name.pid"
done
echo "down.sh: stopped the control plane in $DIR"
