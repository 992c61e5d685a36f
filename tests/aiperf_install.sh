#!/usr/bin/env bash
# AIPerf 0.13.0, the reference the differential tests compare dagperf with, in a virtual
# environment of its own (never dagperf's: it is test-only), cached for the next run:
# ${DAGPERF_AIPERF_HOME:-~/.cache/dagperf-aiperf}/venv. About 90 s and 1.2 GB when cold.
set -euo pipefail
version=0.13.0
home=${DAGPERF_AIPERF_HOME:-$HOME/.cache/dagperf-aiperf}
venv=$home/venv
if [ -x "$venv/bin/aiperf" ] && [ "$("$venv/bin/aiperf" --version 2>/dev/null | tail -1)" = "$version" ]; then
  exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet "aiperf==$version"
"$venv/bin/aiperf" --version
