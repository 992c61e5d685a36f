"""The documentation holds together: every relative link in README.md and docs/*.md reaches a
file, and a #fragment a heading of it (as GitHub makes anchors of headings); every repository
path a page names in code exists; and the README links every page of docs/."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", flags=re.MULTILINE | re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", flags=re.DOTALL)
# A path from the repository's root, as the pages write them in code: no wildcard, no placeholder
# (worker/ alone starts the dagperf.worker package's modules, as docs/architecture.md names them).
REPO_PATH = re.compile(
    r"(?:examples|docs|bench|tests|charts|crds|worker/dagperf|operator)/[\w.+-]+(?:/[\w.+-]+)*/?"
)


def prose(text: str) -> str:
    """The text a reader sees as Markdown: fenced blocks left out."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text, lower case, punctuation but hyphens
    and underscores dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"[`*]", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: Counter[str] = Counter()
    found = set()
    for line in prose(page.read_text()).splitlines():
        if heading := re.match(r"^#{1,6}\s+(.+?)\s*#*\s*$", line):
            base = slug(heading[1])
            found.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
            seen[base] += 1
    return found


def links(page: Path) -> list[str]:
    text = CODE_SPAN.sub("", prose(page.read_text()))
    return LINK.findall(text)


def test_the_slugs_are_githubs():
    assert slug("Exit codes") == "exit-codes"
    assert slug("Synthetic sessions: `--session-config`") == "synthetic-sessions---session-config"
    assert slug("Repeated runs: is a difference real?") == "repeated-runs-is-a-difference-real"
    assert slug("dagperf's clock against the engine's") == "dagperfs-clock-against-the-engines"
    assert slug("`session_graph`") == "session_graph"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        path, _, fragment = target.partition("#")
        reached = (page.parent / path).resolve() if path else page
        if not reached.exists():
            broken.append(f"{target}: no such file")
        elif fragment and reached.suffix == ".md" and fragment not in anchors(reached):
            broken.append(f"{target}: no heading #{fragment} in {reached.name}")
    assert broken == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_named_in_code_exists(page):
    text = page.read_text()
    blocks = [m[0] for m in FENCE.finditer(text)]  # commands name files too
    spans = [m[2] for m in CODE_SPAN.finditer(prose(text))] + blocks
    words = {word.strip("`'\",;:()").rstrip(".") for span in spans for word in span.split()}
    missing = sorted(w for w in words if REPO_PATH.fullmatch(w) and not (ROOT / w).exists())
    assert missing == []


def test_the_readme_links_every_page_of_the_docs():
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in links(ROOT / "README.md")}
    assert len(linked) > 10  # the links are found at all
    unlinked = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert unlinked == []


def test_the_readme_is_a_front_page():
    """A newcomer's page: what it is, a picture, the quick start, the workflows, the exit codes;
    the details live in docs/."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    headings = re.findall(r"^## (.+)$", prose(text), flags=re.MULTILINE)
    assert headings[:2] == ["How it works", "Quick start"]
    assert "Exit codes" in headings


def test_every_metric_has_its_row_in_the_metrics_page():
    from dagperf.vocabulary import catalog

    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", (ROOT / "docs/metrics.md").read_text(), re.M)
    assert sorted(name for name, _ in rows) == sorted(catalog.METRICS)
    for name, unit in rows:
        assert catalog.METRICS[name].unit == unit.strip(), name
