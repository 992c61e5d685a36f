"""Does AIPerf's own export model read dagperf's summary? Validates a run directory's
`profile_export_aiperf.json` with AIPerf's `JsonExportData` (AIPerf installed in a virtual
environment of its own, as bench/compare.py uses it; see the notes on running AIPerf here).

    python bench/aiperf_export_check.py RUN_DIR [--aiperf-python /tmp/aiperf-venv/bin/python]

Prints `valid` and exits 0, or prints AIPerf's validation errors and exits 1.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, sys
from aiperf.common.models.export_models import JsonExportData
document = json.load(open(sys.argv[1]))
try:
    JsonExportData.model_validate(document)
except Exception as e:
    print(e)
    sys.exit(1)
print("valid")
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--aiperf-python", default="/tmp/aiperf-venv/bin/python")
    args = parser.parse_args()
    summary = args.run_dir / "profile_export_aiperf.json"
    if not summary.exists():
        parser.error(f"{summary} does not exist")
    done = subprocess.run([args.aiperf_python, "-c", PROBE, str(summary)], check=False)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
