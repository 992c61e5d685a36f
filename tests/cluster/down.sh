#!/usr/bin/env bash
# Stops the control plane up.sh started in DAGPERF_CLUSTER_DIR and leaves no process behind:
# each component's process group gets SIGTERM, then SIGKILL after 10 s. A real node (node.sh) goes
# first, with the pods, mounts, network and iptables chains it made.
set -uo pipefail

DIR="${DAGPERF_CLUSTER_DIR:-${TMPDIR:-/tmp}/dagperf-cluster}"
HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null  # stop
. "$HERE/../processes.sh"
[ -d "$DIR" ] || exit 0
cd "$DIR" || exit 1

NODE=""
if [ -d node ]; then
  NODE=1 BIN="$DIR/bin"
  # shellcheck source=tests/cluster/node.sh
  . "$HERE/node.sh"
  node_down
  echo "down.sh: stopped the node in $DIR"
fi
for name in kube-controller-manager kube-apiserver etcd; do
  stop "$DIR/$name.pid"
done
[ -z "$NODE" ] || node_network_down
echo "down.sh: stopped the control plane in $DIR"
