#!/usr/bin/env bash
# The README's test command: install everything the tests need (Debian packages, the Python
# test extras in .venv, the control plane's binaries), then run the suite; arguments go to
# pytest (`bash tests/run.sh -k search`). CI runs it on a clean clone of a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "dagperf needs Python 3.11 or newer; python3 is $(python3 --version)" >&2; exit 1; }

# The metrics tests run a real Prometheus, the operator tests a real kubectl (Debian's
# packages; any kubectl already installed will do), the report tests a real Chromium; the
# control plane's and the engines' scripts need openssl and curl; llama-server is built with
# cmake and a C++ toolchain. (tests/image/build.sh installs podman, runc and mmdebstrap
# itself.)
packages=()
command -v prometheus > /dev/null || packages+=(prometheus)
command -v chromium > /dev/null || packages+=(chromium)
command -v kubectl > /dev/null || packages+=(kubernetes-client)
command -v openssl > /dev/null || packages+=(openssl)
command -v curl > /dev/null || packages+=(curl)
# The real node (tests/cluster/node.sh): runc under containerd, iptables for kube-proxy, nft to
# remove the netfilter tables it leaves, ip for the bridge.
command -v runc > /dev/null || packages+=(runc)
command -v iptables > /dev/null || packages+=(iptables)
command -v nft > /dev/null || packages+=(nftables)
command -v ip > /dev/null || packages+=(iproute2)
command -v cmake > /dev/null || packages+=(cmake)
{ command -v c++ && command -v make; } > /dev/null || packages+=(build-essential)
if [ ${#packages[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${packages[@]}" > /dev/null
fi

python3 -m venv .venv
# shellcheck source=/dev/null  # made just above
. .venv/bin/activate
# uv installs the same packages as pip would, from its cache in ~/.cache/uv: 14 s warm where
# pip took 135 s on a fresh clone (2026-11-29).
started=$SECONDS
pip install --quiet "uv>=0.9"
uv pip install --quiet -e ".[test]"
echo "Python test extras ready in $((SECONDS - started)) s"

# The cluster tests' control plane (etcd, kube-apiserver, kube-controller-manager) and node
# (kubelet, kube-proxy, kube-scheduler, containerd, CNI plugins, CoreDNS, ...), built from
# the Go module proxy into ~/.cache/dagperf-cluster once and reused; the tests would build it on
# first use too, this only makes a missing Go toolchain fail first and the build's time show.
started=$SECONDS
tests/cluster/build.sh > /dev/null
echo "control plane and node binaries ready in $((SECONDS - started)) s"

# The image (one Dockerfile, built with podman on a Debian base that tests/image/build.sh makes
# with mmdebstrap and caches in ~/.cache/dagperf-image; podman's layer cache rebuilds only what
# changed), which the `image` tests run as the cluster runs it.
started=$SECONDS
export DAGPERF_IMAGE_BUILT="$HOME/.cache/dagperf-image/out" # its SBOM and build record
tests/image/build.sh "$DAGPERF_IMAGE_BUILT" | tail -2
echo "image ready in $((SECONDS - started)) s"

# The engine tests' llama-server, built from the llama.cpp that the llama-cpp-python sdist
# vendors into ~/.cache/dagperf-engines once and reused (its cold build times: docs/testing.md).
started=$SECONDS
tests/engines/build.sh > /dev/null
echo "llama-server ready in $((SECONDS - started)) s"

# AIPerf 0.13, the reference of the differential tests, in a virtual environment of its own in
# ~/.cache/dagperf-aiperf (about 90 s when cold); what it sent for each case is cached there too.
started=$SECONDS
tests/aiperf_install.sh > /dev/null
echo "AIPerf ready in $((SECONDS - started)) s"

# The suite starts hundreds of interpreters. Without bytecode kept (uv installs none, and
# PYTHONDONTWRITEBYTECODE may be set), each compiles every module it imports again: a fresh
# clone's pytest took 782 s so, 585-617 s keeping it (2026-11-29).
unset PYTHONDONTWRITEBYTECODE
# Three workers on two cores: many tests wait on the processes they start (a fourth gained
# nothing: docs/testing.md); each real stack stays on one.
python -m pytest -q -n 3 --dist loadgroup "$@"
