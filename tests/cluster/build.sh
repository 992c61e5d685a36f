#!/usr/bin/env bash
# Builds the real cluster the cluster tests run against, once, into a cache outside the checkout,
# every part from a package registry:
# - the control plane: kube-apiserver, kube-controller-manager and a kubectl of the same release
#   from the k8s.io/kubernetes Go module, and etcd from its own, at the version that Kubernetes
#   release pins;
# - the node (tests/cluster/node.sh): kubelet, kube-proxy and kube-scheduler from the same
#   module and build, containerd with its runc shim and ctr, the CNI plugins, crictl and CoreDNS
#   from their Go modules, and a pause binary compiled here (runc comes from Debian).
# Each build prints its time on stderr. Later runs reuse the binaries.
# Prints the directory holding them as its last line of stdout.
#
#   K8S_VERSION          Kubernetes release (default below)
#   DAGPERF_CLUSTER_CACHE where binaries, modules and the Go build cache live
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"

K8S_VERSION="${K8S_VERSION:-1.36.3}"
CONTAINERD_VERSION=v2.4.2 CNI_PLUGINS_VERSION=v1.10.0 CRI_TOOLS_VERSION=v1.37.0
COREDNS_VERSION=v1.15.0 LOCAL_PATH_VERSION=v0.0.33
# The Go checksum database does not answer for local-path-provisioner's module here: its hash
# (`go mod download -json`'s Sum) is pinned instead, and checked before it is built.
LOCAL_PATH_SUM="h1:areux9aOeBrvQyTo946mh+uoV/bPWIlDnvO5goL5wPo="
CACHE="${DAGPERF_CLUSTER_CACHE:-$HOME/.cache/dagperf-cluster}"
BIN="$CACHE/v$K8S_VERSION/bin"
KUBE=(kube-apiserver kube-controller-manager kubectl kubelet kube-proxy kube-scheduler)
CNI_PLUGINS=(bridge host-local loopback portmap)
COMPONENTS=(etcd "${KUBE[@]}" containerd containerd-shim-runc-v2 ctr crictl coredns pause
  local-path-provisioner
  "${CNI_PLUGINS[@]/#/cni/}")

have() { # have NAME: built, and for Kubernetes' own, with this release's version stamped in
  [ -x "$BIN/$1" ] || return 1
  case $1 in
    kube-* | kubelet) [ "$("$BIN/$1" --version 2> /dev/null)" = "Kubernetes v$K8S_VERSION" ] ;;
  esac
}
have_all() {
  local c
  for c in "${COMPONENTS[@]}"; do have "$c" || return 1; done
}
if have_all; then
  echo "$BIN"
  exit 0
fi

command -v go > /dev/null || { echo "build.sh: no Go toolchain on PATH (install Go 1.26 or newer)" >&2; exit 1; }
export GOMODCACHE="$CACHE/gomod" GOCACHE="$CACHE/gocache" GOFLAGS="-mod=mod" GOTOOLCHAIN=local
export CGO_ENABLED=0 GOWORK=off
mkdir -p "$BIN/cni"
started=$SECONDS
timed() { # timed WHAT COMMAND...: runs it at the lowest priority, then says how long it took
  local what=$1 t=$SECONDS
  shift
  echo "build.sh: building $what" >&2
  nice -n 19 "$@"
  echo "build.sh: built $what in $((SECONDS - t)) s" >&2
}

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
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
GO
quietly() { # quietly DIR COMMAND...: its output only if it fails (module downloads are many)
  local dir=$1 log="$CACHE/last-step.log"
  shift
  (cd "$dir" && "$@") > "$log" 2>&1 || { cat "$log" >&2; echo "build.sh: failed: $*" >&2; exit 1; }
}
kube_missing=()
for c in "${KUBE[@]}"; do have "$c" || kube_missing+=("$c"); done
[ ${#kube_missing[@]} -eq 0 ] || quietly "$kube" go mod tidy
# What /version reports, as the release build stamps it (otherwise v0.0.0-master).
stamp="-s -w"
for var in "gitVersion=v$K8S_VERSION" "gitMajor=${K8S_VERSION%%.*}" \
  "gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)" gitTreeState=clean; do
  stamp+=" -X k8s.io/component-base/version.$var -X k8s.io/client-go/pkg/version.$var"
done
# One build after another, sharing the compiled packages through the build cache.
for c in "${kube_missing[@]}"; do
  (cd "$kube" && timed "$c v$K8S_VERSION" go build -trimpath -ldflags "$stamp" -o "$BIN/$c.part" "k8s.io/kubernetes/cmd/$c")
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
  quietly "$etcd" go mod tidy
  (cd "$etcd" && timed "etcd $etcd_version" go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.part" .)
  mv "$BIN/etcd.part" "$BIN/etcd"
fi

# --- the node's other parts: each built from its own module at its release, as its go.mod pins
# its dependencies (`go install pkg@version`: none of these modules has replace directives) ----
install() { # install WHAT DEST LDFLAGS TAGS PACKAGE@VERSION...: into DEST, through a staging dir
  local what=$1 dest=$2 ldflags=$3 tags=$4 stage="$BIN/.stage"
  shift 4
  rm -rf "$stage"
  echo "build.sh: building $what" >&2
  local t=$SECONDS
  quietly "$CACHE" env GOBIN="$stage" nice -n 19 \
    go install -trimpath -ldflags "-s -w $ldflags" -tags "$tags" "$@"
  echo "build.sh: built $what in $((SECONDS - t)) s" >&2
  mv "$stage"/* "$dest"/
  rmdir "$stage"
}
# Pure Go, as containerd's own static release builds are (CGO_ENABLED=0 leaves out only the
# btrfs snapshotter, which needs cgo; overlayfs is the default). The shim is built without gRPC
# (ttrpc only), as containerd's Makefile builds it.
containerd=github.com/containerd/containerd/v2
stamp="-X $containerd/version.Version=$CONTAINERD_VERSION -X $containerd/version.Package=github.com/containerd/containerd"
if ! have containerd || ! have ctr; then
  install "containerd and ctr $CONTAINERD_VERSION" "$BIN" "$stamp" urfave_cli_no_docs     "$containerd/cmd/containerd@$CONTAINERD_VERSION" "$containerd/cmd/ctr@$CONTAINERD_VERSION"
fi
if ! have containerd-shim-runc-v2; then
  install "containerd-shim-runc-v2 $CONTAINERD_VERSION" "$BIN" "$stamp" urfave_cli_no_docs,no_grpc     "$containerd/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
fi
if ! have cni/bridge || ! have cni/host-local || ! have cni/loopback || ! have cni/portmap; then
  plugins=github.com/containernetworking/plugins
  install "CNI plugins $CNI_PLUGINS_VERSION (${CNI_PLUGINS[*]})" "$BIN/cni"     "-X $plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION" ""     "$plugins/plugins/main/bridge@$CNI_PLUGINS_VERSION"     "$plugins/plugins/ipam/host-local@$CNI_PLUGINS_VERSION"     "$plugins/plugins/main/loopback@$CNI_PLUGINS_VERSION"     "$plugins/plugins/meta/portmap@$CNI_PLUGINS_VERSION"
fi
if ! have crictl; then
  install "crictl $CRI_TOOLS_VERSION" "$BIN" "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRI_TOOLS_VERSION" ""     "sigs.k8s.io/cri-tools/cmd/crictl@$CRI_TOOLS_VERSION"
fi
if ! have coredns; then
  install "CoreDNS $COREDNS_VERSION" "$BIN" "" "" "github.com/coredns/coredns@$COREDNS_VERSION"
fi
if ! have local-path-provisioner; then
  local_path=github.com/rancher/local-path-provisioner
  sum="$(GONOSUMDB=$local_path go mod download -json "$local_path@$LOCAL_PATH_VERSION" | sed -n 's/^\t"Sum": "\(.*\)",$/\1/p')"
  if [ "$sum" != "$LOCAL_PATH_SUM" ]; then
    echo "build.sh: $local_path@$LOCAL_PATH_VERSION has hash '$sum', expected $LOCAL_PATH_SUM" >&2
    exit 1
  fi
  GONOSUMDB=$local_path install "local-path-provisioner $LOCAL_PATH_VERSION" "$BIN" "-X main.VERSION=$LOCAL_PATH_VERSION" "" \
    "$local_path@$LOCAL_PATH_VERSION"
fi
# The pod sandbox's one process: sleeps until told to stop, reaping the zombies of a pod that
# shares its PID namespace. A static binary, so its image needs nothing else (node.sh makes it).
if ! have pause; then
  timed "pause" gcc -static -Os -s -o "$BIN/pause.part" "$HERE/pause.c"
  mv "$BIN/pause.part" "$BIN/pause"
fi

have_all || { echo "build.sh: a component is missing from $BIN after the build" >&2; exit 1; }
echo "build.sh: built in $((SECONDS - started)) s" >&2
echo "$BIN"
