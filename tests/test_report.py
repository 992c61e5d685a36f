"""`dagperf report`: real runs on the built-in simulator, their report rendered in headless
Chromium (Debian's package, driven by Playwright), and the command's answers to bad input."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image
from playwright.sync_api import sync_playwright

from dagperf.report import write_report
from dagperf.report.compare import verdict
from dagperf.vocabulary import catalog

ROOT = Path(__file__).resolve().parent.parent
AGENT_TREE = ROOT / "examples" / "report" / "agent-tree.dag.jsonl"
QUICK_START = ROOT / "examples" / "dag_jsonl" / "example.dag.jsonl"  # one session of five
CHROMIUM = shutil.which("chromium")


def dagperf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dagperf", *args], capture_output=True, text=True, timeout=120
    )


def profiled(directory: Path, *flags: str) -> Path:
    done = dagperf(
        "profile", "--input-file", str(AGENT_TREE), "--streaming", "--concurrency", "2",
        "--request-count", "24", "--artifact-dir", str(directory), "--quiet", *flags,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return directory


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two runs of the agent tree: the second on a server whose first token comes 60 ms later,
    written with `profile --report`."""
    base = tmp_path_factory.mktemp("report")
    fast = profiled(base / "fast")
    slow = profiled(base / "slow", "--sim-ttft-ms", "80", "--report")
    return fast, slow


class Rendered:
    """What a browser made of a page: its text, console errors, requests and a screenshot."""

    def __init__(self, path: Path):
        assert CHROMIUM, "needs Debian's chromium: apt-get install chromium (tests/run.sh does)"
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
            page.on("pageerror", lambda e: self.errors.append(str(e)))
            page.on("request", lambda r: self.requests.append(r.url))
            page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
            page.goto(path.as_uri(), wait_until="load")
            self.figures = page.locator(".figure").count()
            self.drawn = page.locator(".figure .svg-container").count()
            self.text = page.evaluate("document.body.textContent")
            self.ticks = page.locator(".ytick text").all_text_contents()
            self.screenshot = Image.open(io.BytesIO(page.screenshot(full_page=False)))
            browser.close()


def sessions_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "session_export.jsonl").read_text().splitlines()]


def conversations_of(run: Path) -> set[str]:
    lines = (run / "profile_export.jsonl").read_text().splitlines()
    return {json.loads(line)["metadata"]["conversation_id"] for line in lines}


def test_one_run_renders_offline_with_every_session_and_no_console_error(runs):
    fast, _ = runs
    report = write_report([fast])
    assert report == fast / "report.html"
    seen = Rendered(report)
    assert seen.errors == []
    assert seen.requests == [report.as_uri()]  # nothing fetched beyond the file itself
    for session in sessions_of(fast):  # each tree is named in the timeline by its id
        assert f"{session['conversation_id']} · {session['root_correlation_id'][:8]}" in seen.text
    for conversation in conversations_of(fast):
        assert conversation in seen.text
    # the timeline, the critical path split, 4 distributions (CDF and histogram), throughput and
    # the FORK siblings: every figure drew its SVG
    assert seen.figures == seen.drawn == 12
    colours = seen.screenshot.convert("RGB").getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 20, "a blank screenshot"


def test_the_slowest_tree_and_why_are_in_the_report(runs):
    fast, _ = runs
    html = write_report([fast]).read_text()
    slowest = max(sessions_of(fast), key=lambda s: s["duration_ms"])
    path = slowest["critical_path"]
    # the first row of the slowest-trees table is the slowest tree, with its critical path
    first_row = html.split("<th>Mostly</th>", 1)[1].split("</tr>", 2)[1]
    assert slowest["root_correlation_id"][:8] in first_row
    assert " → ".join(path["path"]) in first_row
    assert f"waited {path['join_wait_ms']:,.1f} ms on sub-agents" in first_row


def test_a_comparison_names_both_runs_and_marks_the_slower_first_token_worse(runs, tmp_path):
    fast, slow = runs
    assert (slow / "report.html").exists()  # written by `profile --report`
    out = tmp_path / "compare.html"
    done = dagperf("report", str(fast), str(slow), "--label", "baseline", "--label", "slow-ttft",
                   "--output", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"Report: {out}"
    seen = Rendered(out)
    assert seen.errors == []
    assert "dagperf comparison: baseline vs slow-ttft" in seen.text
    assert "slow-ttft vs baseline" in seen.text
    html = out.read_text()
    row = html.split("<td>Time to First Token p50</td>", 1)[1].split("</tr>", 1)[0]
    assert 'class="worse"' in row
    row = html.split("<td>Session Duration p50</td>", 1)[1].split("</tr>", 1)[0]
    assert 'class="worse"' in row


def test_a_change_is_judged_by_the_metric_direction_beyond_the_noise():
    assert verdict(catalog.TIME_TO_FIRST_TOKEN, 100.0, 150.0) == ("+50.0%", "worse")
    assert verdict(catalog.TIME_TO_FIRST_TOKEN, 100.0, 50.0) == ("-50.0%", "better")
    assert verdict(catalog.REQUEST_THROUGHPUT, 100.0, 150.0) == ("+50.0%", "better")
    assert verdict(catalog.REQUEST_THROUGHPUT, 100.0, 99.5) == ("-0.5%", "")
    assert verdict(catalog.INPUT_SEQUENCE_LENGTH, 100.0, 150.0) == ("+50.0%", "")
    assert verdict(catalog.REQUEST_THROUGHPUT, None, 1.0) == ("—", "")


def test_bad_input_is_named_without_a_traceback(tmp_path):
    missing = dagperf("report", str(tmp_path / "nowhere"))
    assert missing.returncode == 1
    assert missing.stderr == f"dagperf report: {tmp_path / 'nowhere'}: not a directory\n"
    empty = dagperf("report", str(tmp_path))
    assert "profile_export_aiperf.json: missing (is this a dagperf run directory?)" in empty.stderr
    (tmp_path / "profile_export_aiperf.json").write_text("{}")
    (tmp_path / "profile_export.jsonl").write_text('{"metadata": {}}\nnot json\n')
    broken = dagperf("report", str(tmp_path))
    assert broken.returncode == 1
    assert f"{tmp_path / 'profile_export.jsonl'}:2: not a dagperf record" in broken.stderr
    assert "Traceback" not in broken.stderr
    labels = dagperf("report", str(tmp_path), str(tmp_path), "--label", "one")
    assert "1 labels for 2 run directories" in labels.stderr
    same = dagperf("report", str(tmp_path), str(tmp_path))
    assert "two runs have the same label" in same.stderr


def figures_in(html: str) -> list[dict]:
    data = html.split('<script type="application/json" id="figures">', 1)[1].split("</script>")[0]
    return json.loads(data)


def test_what_is_drawn_is_capped_while_everything_is_counted(tmp_path):
    """3,000 requests in 375 trees: the timeline draws the 40 slowest, each distribution at
    most 400 points, the throughput at most 300 buckets; the histograms count every request.
    (bench/report_size.py measures a 100,000-request run: 5.1 MB, most of it Plotly.)"""
    run = profiled(
        tmp_path / "big", "--concurrency", "64", "--request-count", "3000", "--sim-ttft-ms", "0",
        "--sim-itl-ms", "0", "--sim-prefill-ms-per-token", "0",
    )  # fmt: skip
    html = write_report([run]).read_text()
    assert len(html) < 10_000_000
    figures = {f["layout"]["title"]["text"]: f for f in figures_in(html)}
    timeline = figures["DAG timeline (slowest trees first)"]
    lanes = [label for label in timeline["layout"]["yaxis"]["ticktext"] if " · " in label]
    slowest = sorted(sessions_of(run), key=lambda s: -s["duration_ms"])[:40]
    assert lanes == [f"planner · {s['root_correlation_id'][:8]}" for s in slowest]
    for trace in figures["Request Latency: CDF"]["data"]:
        assert len(trace["x"]) == 400
    assert sum(figures["Request Latency: histogram"]["data"][0]["y"]) == 3000
    assert len(figures["Throughput over time"]["data"][0]["x"]) <= 300


def test_repeated_runs_and_search_steps_are_compared_with_report(tmp_path):
    repeated = dagperf(
        "profile", "--input-file", str(AGENT_TREE), "--request-count", "16",
        "--num-profile-runs", "2", "--report", "--artifact-dir", str(tmp_path / "repeat"),
    )  # fmt: skip
    assert repeated.returncode == 0, repeated.stderr
    html = (tmp_path / "repeat" / "aggregate" / "report.html").read_text()
    assert "dagperf comparison: run_0001 vs run_0002" in html
    search = dagperf(
        "search", "--input-file", str(AGENT_TREE), "--request-count", "32", "--slo",
        "request_latency:p90:10000", "--search-parameter", "concurrency", "--sweep", "1,2",
        "--report", "--artifact-dir", str(tmp_path / "search"),
    )  # fmt: skip
    assert search.returncode == 0, search.stderr
    html = (tmp_path / "search" / "report.html").read_text()
    labels = "step01-concurrency-1 vs step02-concurrency-2"
    assert f"dagperf comparison: {labels}" in html
    assert "Window and verdicts: step01-concurrency-1" in html  # each step's verdict, plainly
    assert '<span class="meets">meets</span>' in html


def test_hostile_names_stay_text(tmp_path):
    """A session id and a label written as markup are shown as written, never run."""
    hostile = "<img src=x onerror=alert(1)>"
    dataset = tmp_path / "hostile.dag.jsonl"
    line = {"session_id": hostile, "turns": [{"messages": [{"role": "user", "content": "hi"}]}]}
    dataset.write_text(json.dumps(line) + "\n")
    run = tmp_path / "run"
    done = dagperf("profile", "--input-file", str(dataset), "--request-count", "2",
                   "--artifact-dir", str(run), "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = tmp_path / "report.html"
    label = "</script><script>alert(2)</script>"
    write_report([run, run], out, labels=[label, "other"])
    seen = Rendered(out)
    assert seen.errors == [] and seen.dialogs == []
    assert hostile in seen.text and label in seen.text
    assert any(tick.startswith(f"{hostile} · ") for tick in seen.ticks)  # the timeline's lane


# Every figure's text, its box, and (hovered) its toolbar's box, as the browser laid them out.
LAYOUT = """
(figure) => {
  const box = (e) => { const r = e.getBoundingClientRect();
                       return {x0: r.left, y0: r.top, x1: r.right, y1: r.bottom}; };
  const texts = (selector) => [...figure.querySelectorAll(selector)]
      .filter((e) => e.textContent.trim() && e.getBoundingClientRect().width > 0)
      .map((e) => ({text: e.textContent, ...box(e)}));
  const bar = figure.querySelector('.modebar');
  return {
    figure: box(figure),
    title: texts('text.gtitle'),
    axisTitles: texts('text.xtitle, text.ytitle, text.y2title'),
    ticks: texts('g.xtick text, g.ytick text, g.y2tick text'),
    notes: texts('g.annotation text'),
    legend: texts('text.legendtext'),
    toolbar: bar && bar.getBoundingClientRect().width > 0 ? box(bar) : null,
    points: figure.querySelectorAll('.scatterlayer .point').length,
    panels: [...figure.querySelectorAll('g.subplot')].map((g) => ({
      name: g.getAttribute('class'),
      lines: [...g.querySelectorAll('path.js-line')].map(box),
    })),
    dashes: [...figure.querySelectorAll('.scatterlayer path.js-line')]
      .map((p) => p.style.strokeDasharray || 'solid'),
  };
}
"""


def overlap(a: dict, b: dict) -> bool:
    return (
        a["x0"] < b["x1"] - 1
        and b["x0"] < a["x1"] - 1
        and (a["y0"] < b["y1"] - 1 and b["y0"] < a["y1"] - 1)
    )


def laid_out(path: Path) -> dict[str, dict]:
    """Each figure's layout by its title, read with its toolbar showing (hovered), as a reader
    about to use the toolbar sees it; in a window just wide enough for two charts side by side,
    where they are narrowest."""
    assert CHROMIUM, "needs Debian's chromium: apt-get install chromium (tests/run.sh does)"
    out = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        page = browser.new_page(viewport={"width": 1100, "height": 1000})
        page.goto(path.as_uri(), wait_until="load")
        for figure in page.locator(".figure").all():
            figure.scroll_into_view_if_needed()
            figure.hover(position={"x": 5, "y": 5})
            page.wait_for_function(
                "(f) => f.querySelector('.modebar')", arg=figure.element_handle()
            )
            seen = figure.evaluate(LAYOUT)
            out[seen["title"][0]["text"]] = seen
        browser.close()
    return out


def assert_nothing_collides(figures: dict[str, dict]) -> None:
    """No text outside its figure (a cut label), no axis title over a tick label or another
    title, no toolbar over a title."""
    for title, f in figures.items():
        texts = f["title"] + f["axisTitles"] + f["ticks"] + f["notes"] + f["legend"]
        for t in texts:
            inside = f["figure"]["x0"] - 1 <= t["x0"] and t["x1"] <= f["figure"]["x1"] + 1
            assert inside, f"{title}: {t['text']!r} is cut at the figure's edge"
        for axis in f["axisTitles"]:
            for other in f["ticks"] + f["title"] + f["notes"]:
                assert not overlap(axis, other), f"{title}: {axis['text']!r} on {other['text']!r}"
        assert f["toolbar"] is not None, f"{title}: no toolbar shown on hover"
        for t in f["title"] + f["notes"]:
            assert not overlap(f["toolbar"], t), f"{title}: the toolbar covers {t['text']!r}"


@pytest.fixture(scope="module")
def first_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Quick start's run, as a newcomer makes it: one session, the default directory."""
    here = tmp_path_factory.mktemp("quick-start")
    done = subprocess.run(
        [sys.executable, "-m", "dagperf", "profile", "--input-file", str(QUICK_START),
         "--custom-dataset-type", "dag_jsonl", "--report"],
        capture_output=True, text=True, timeout=120, cwd=here,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return here / "artifacts" / "example-chat-concurrency1" / "report.html"


def test_the_quick_starts_one_session_report_looks_deliberate(first_report):
    figures = laid_out(first_report)
    assert_nothing_collides(figures)
    critical = figures["Critical path: share of session time"]
    assert [t["text"] for t in critical["ticks"] if "example" in t["text"]] == [
        "example-chat-concurrency1"
    ]  # whole, and (above) inside its figure
    # One session: its duration is a point with a note, not an empty chart.
    for kind in ("CDF", "histogram"):
        duration = figures[f"Session Duration: {kind}"]
        assert duration["points"] >= 1, kind
        (note,) = duration["notes"]
        assert (
            note["text"].startswith("one session (")
            and "a distribution needs more" in (note["text"])
        )
    # Throughput: requests/s and tokens/s in panels of their own, one above the other.
    top, bottom = figures["Throughput over time"]["panels"]
    assert top["lines"] and bottom["lines"]
    assert all(a["y1"] <= b["y0"] for a in top["lines"] for b in bottom["lines"])
    text = first_report.read_text()
    assert "1 session ·" in text and "1 sessions" not in text
    glance = text.split('class="glance"', 1)[1].split("</table>", 1)[0]
    assert "<td>Sessions</td><td>1</td>" in glance  # a count, not 1.00


def test_a_comparison_keeps_long_names_whole_in_tooltips_and_overlaid_lines_apart(runs, tmp_path):
    fast, slow = runs
    long_name = "baseline-on-the-simulator-with-a-long-descriptive-name"
    out = tmp_path / "compare.html"
    write_report([fast, slow], out, labels=[long_name, "slow-ttft"])
    figures = laid_out(out)
    assert_nothing_collides(figures)
    critical = figures["Critical path: share of session time"]
    (short,) = [t["text"] for t in critical["ticks"] if "…" in t["text"]]
    assert long_name.startswith(short.split("…")[0]) and long_name.endswith(short.split("…")[1])
    assert len(short) <= 28
    # Overlaid runs differ in dash as well as colour: two equal curves still show both.
    for title in ("Request Latency: CDF", "Throughput over time"):
        assert len(set(figures[title]["dashes"])) >= 2, title
    # The whole name is one hover away.
    assert CHROMIUM
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(out.as_uri(), wait_until="load")
        bars = page.locator(".figure", has_text="Critical path").locator("g.point path")
        bars.first.hover(force=True)
        hover = page.locator(".hoverlayer .hovertext").first
        hover.wait_for()
        assert long_name in hover.text_content()
        browser.close()


def test_a_run_cut_short_shows_its_cut_requests_plainly_not_as_errors(tmp_path):
    """Two slots, four requests at once, stopped 1 s in with 0.3 s of grace: the report says
    how many the run cut, that they are not errors, and what they leave the window's figures
    at; its error table stays empty."""
    run = tmp_path / "cut"
    done = dagperf(
        "profile", "--input-file", str(ROOT / "examples" / "search" / "single-turn.dag.jsonl"),
        "--streaming", "--sim-slots", "2", "--sim-ttft-ms", "50", "--sim-itl-ms", "50",
        "--sim-output-tokens", "12", "--concurrency", "4", "--benchmark-duration", "1",
        "--benchmark-grace-period", "0.3", "--report", "--artifact-dir", str(run), "--quiet",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads((run / "profile_export_aiperf.json").read_text())
    cut = int(summary["cut_request_count"]["avg"])
    assert cut >= 1
    seen = Rendered(run / "report.html")
    assert seen.errors == []
    assert "Cut short by the run (not errors)" in seen.text
    assert f"{cut} cut short by the run" in seen.text and "No failed requests." in seen.text
    assert "With the cut requests (ms)" in seen.text
