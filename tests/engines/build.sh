#!/usr/bin/env bash
# Builds llama.cpp's llama-server, the real engine the engine tests run against, once, into a
# cache outside the checkout. The source is the llama.cpp that the PyPI sdist of
# llama-cpp-python vendors (a registry package, pinned); only the llama-server target is built,
# for any x86-64/arm64 CPU (no -march=native: the cache may be shared between machines), without
# curl (models are local files). Later runs reuse the binary while its version stamp matches.
# Prints the directory holding it as its last line of stdout.
#
# Needs cmake and a C/C++ toolchain (Debian: cmake build-essential; tests/run.sh installs them)
# and pip (for `pip download`).
#
#   LLAMA_CPP_PYTHON_VERSION  the llama-cpp-python sdist whose llama.cpp is built (default below)
#   DAGPERF_ENGINES_CACHE     where the source and the binary live
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE="${DAGPERF_ENGINES_CACHE:-$HOME/.cache/dagperf-engines}"
ROOT="$CACHE/$VERSION"
BIN="$ROOT/bin"
STAMP="llama-cpp-python $VERSION llama-server GGML_NATIVE=OFF LLAMA_CURL=OFF"

have_it() {
  [ -x "$BIN/llama-server" ] && [ "$(cat "$BIN/.stamp" 2> /dev/null)" = "$STAMP" ]
}
if have_it; then
  echo "$BIN"
  exit 0
fi

for tool in cmake c++ make; do
  command -v "$tool" > /dev/null \
    || { echo "build.sh: no $tool on PATH (Debian: apt-get install cmake build-essential)" >&2; exit 1; }
done
PYTHON="$(command -v python3 || command -v python)"
started=$SECONDS

src="$ROOT/src"
rm -rf "$src" "$ROOT/build"
mkdir -p "$src" "$BIN"
echo "build.sh: fetching the llama-cpp-python $VERSION sdist" >&2
"$PYTHON" -m pip download --quiet --no-binary :all: --no-deps --dest "$src" \
  "llama-cpp-python==$VERSION" >&2 \
  || { echo "build.sh: could not download the llama-cpp-python $VERSION sdist from PyPI" >&2; exit 1; }
tar -xzf "$src"/llama_cpp_python-"$VERSION".tar.gz -C "$src"
llama="$src/llama_cpp_python-$VERSION/vendor/llama.cpp"
[ -f "$llama/CMakeLists.txt" ] || { echo "build.sh: the sdist carries no vendor/llama.cpp" >&2; exit 1; }

quietly() { # quietly COMMAND...: its output only if it fails
  local log="$ROOT/last-step.log"
  "$@" > "$log" 2>&1 || { tail -40 "$log" >&2; echo "build.sh: failed: $*" >&2; exit 1; }
}
echo "build.sh: building llama-server from llama-cpp-python $VERSION" >&2
quietly cmake -S "$llama" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON
quietly nice -n 19 cmake --build "$ROOT/build" --target llama-server -j "${BUILD_JOBS:-2}"
cp "$ROOT/build/bin/llama-server" "$BIN/llama-server.part"
strip "$BIN/llama-server.part" 2> /dev/null || true
mv "$BIN/llama-server.part" "$BIN/llama-server"
echo "$STAMP" > "$BIN/.stamp"
rm -rf "$src" "$ROOT/build"  # a gigabyte of objects the cache need not keep

have_it || { echo "build.sh: no llama-server in $BIN after the build" >&2; exit 1; }
echo "build.sh: built in $((SECONDS - started)) s" >&2
echo "$BIN"
