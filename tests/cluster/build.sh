#!/usr/bin/env bash
# Builds the real control plane the cluster tests run against, once, into a cache outside the
# checkout: kube-apiserver, kube-controller-manager and a kubectl of the same release from the
# k8s.io/kubernetes Go module, and etcd from its own, at the version that Kubernetes release
# pins. Later runs reuse the binaries.
# Prints the directory holding them as its last line of stdout.
#
#   K8S_VERSION          Kubernetes release (default below)
#   DAGPERF_CLUSTER_CACHE where binaries, modules and the Go build cache live
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.36.3}"
CACHE="${DAGPERF_CLUSTER_CACHE:-$HOME/.cache/dagperf-cluster}"
BIN="$CACHE/v$K8S_VERSION/bin"
COMPONENTS=(etcd kube-apiserver kube-controller-manager kubectl)

have_all() {
  local c
  for c in "${COMPONENTS[@]}"; do [ -x "$BIN/$c" ] || return 1; done
  # Built with its version stamped in (helm and clients check what the server says it is).
  [ "$("$BIN/kube-apiserver" --version 2> /dev/null)" = "Kubernetes v$K8S_VERSION" ]
}
if have_all; then
  echo "$BIN"
  exit 0
fi

command -v go > /dev/null || { echo "build.sh: no Go toolchain on PATH (install Go 1.26 or newer)" >&2; exit 1; }
export GOMODCACHE="$CACHE/gomod" GOCACHE="$CACHE/gocache" GOFLAGS="-mod=mod" GOTOOLCHAIN=local
export CGO_ENABLED=0 GOWORK=off
mkdir -p "$BIN"
started=$SECONDS

# The main module's go.mod requires each staging module (k8s.io/api, ...) at v0.0.0 and replaces
# it with a directory of the Kubernetes repository; outside that repository those versions only
# resolve when pinned to their published v0.X.Y releases, one replace line each.
kube_mod="$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
[ -f "$kube_mod" ] || { echo "build.sh: could not fetch k8s.io/kubernetes@v$K8S_VERSION from the Go module proxy" >&2; exit 1; }
staging_version="v0.${K8S_VERSION#1.}"
etcd_version="$(sed -n 's#^\s*go.etcd.io/etcd/server/v3 \(v[0-9.]*\).*#\1#p' "$kube_mod" | head -1)"
[ -n "$etcd_version" ] || { echo "build.sh: k8s.io/kubernetes@v$K8S_VERSION names no etcd server version" >&2; exit 1; }


kube="$CACHE/v$K8S_VERSION/src/kubernetes"
mkdir -p "$kube"
{
  echo "module dagperf.test/kubernetes"
  echo
  echo "go $(sed -n 's/^go \(.*\)/\1/p' "$kube_mod")"
  echo
  echo "require k8s.io/kubernetes v$K8S_VERSION"
  echo
  sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#replace \1 => \1 '"$staging_version"'#p' "$kube_mod"
} > "$kube/go.mod"
cat > "$kube/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
quietly() { # quietly DIR COMMAND...: its output only if it fails (module downloads are many)
  local dir=$1 log="$CACHE/last-step.log"
  shift
  (cd "$dir" && "$@") > "$log" 2>&1 || { cat "$log" >&2; echo "build.sh: failed: $*" >&2; exit 1; }
}
quietly "$kube" go mod tidy
# What /version reports, as the release build stamps it (otherwise v0.0.0-master).
stamp="-s -w"
for var in "gitVersion=v$K8S_VERSION" "gitMajor=${K8S_VERSION%%.*}" \
  "gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)" gitTreeState=clean; do
  stamp+=" -X k8s.io/component-base/version.$var -X k8s.io/client-go/pkg/version.$var"
done
for c in kube-apiserver kube-controller-manager kubectl; do
  echo "build.sh: building $c v$K8S_VERSION" >&2
  (cd "$kube" && nice -n 19 go build -trimpath -ldflags "$stamp" -o "$BIN/$c.part" "k8s.io/kubernetes/cmd/$c")
  mv "$BIN/$c.part" "$BIN/$c"
done

if [ ! -x "$BIN/etcd" ]; then
  etcd="$CACHE/v$K8S_VERSION/src/etcd"
  mkdir -p "$etcd"
  printf 'module dagperf.test/etcd\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$etcd_version" > "$etcd/go.mod"
  cat > "$etcd/main.go" <<'GO'
// etcd's own main, built from its published server module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  echo "build.sh: building etcd $etcd_version" >&2
  quietly "$etcd" go mod tidy
  (cd "$etcd" && nice -n 19 go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.part" .)
  mv "$BIN/etcd.part" "$BIN/etcd"
fi

have_all || { echo "build.sh: a component is missing from $BIN after the build" >&2; exit 1; }
echo "build.sh: built in $((SECONDS - started)) s" >&2
echo "$BIN"
