"""How the report's pictures in docs/ are made (run from the repository's root, with the test
extras installed and Debian's chromium):

    python docs/screenshots.py

Two runs of examples/report/agent-tree.dag.jsonl on the built-in simulator, the second with a
slower prefill, then one run's report and their comparison, photographed in headless Chromium.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
DATASET = ROOT / "examples" / "report" / "agent-tree.dag.jsonl"
OUT = ROOT / "docs" / "images"


def dagperf(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "dagperf", *args], check=True, capture_output=True)


def photograph(page: object, html: Path, target: Path, height: int) -> None:
    page.goto(html.as_uri(), wait_until="load")  # type: ignore[attr-defined]
    page.set_viewport_size({"width": 1400, "height": height})  # type: ignore[attr-defined]
    page.screenshot(path=str(target))  # type: ignore[attr-defined]
    print(f"wrote {target.relative_to(ROOT)}")


def main() -> None:
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        runs = {"baseline": Path(tmp) / "baseline", "slow-prefill": Path(tmp) / "slow-prefill"}
        for name, extra in (
            ("baseline", []),
            ("slow-prefill", ["--sim-prefill-ms-per-token", "1"]),
        ):
            dagperf("profile", "--input-file", str(DATASET), "--streaming", "--concurrency", "2",
                    "--request-count", "48", "--artifact-dir", str(runs[name]), "--quiet",
                    "--report", *extra)  # fmt: skip
        compared = Path(tmp) / "compare.html"
        dagperf("report", *map(str, runs.values()), "--output", str(compared))
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"))
            page = browser.new_page()
            photograph(page, runs["baseline"] / "report.html", OUT / "report-run.png", 1900)
            photograph(page, compared, OUT / "report-compare.png", 1500)
            browser.close()


if __name__ == "__main__":
    main()
