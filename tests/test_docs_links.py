"""The README is the way in: it links every page of docs/, and every relative link of README.md and docs/*.md
(a file, or a heading of one) exists. The generated blocks sit between their markers (scripts/readme_results.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from workflow_helpers import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", path.read_text(), re.M)}


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_relative_links_resolve(page: Path):
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue  # a web address
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        assert path.exists(), f"{page.relative_to(REPO)}: {target} does not exist"
        if anchor and path.suffix == ".md":
            assert anchor in anchors(path), f"{page.relative_to(REPO)}: {target}: no such heading"


def test_readme_links_every_docs_page_and_stays_short():
    readme = (REPO / "README.md").read_text()
    linked = {(REPO / t.partition("#")[0]).resolve() for t in LINK.findall(readme)}
    missing = [p.name for p in sorted((REPO / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not missing, f"README.md links no docs page named {missing}"
    assert len(readme.splitlines()) <= 160, "README.md: a newcomer's five minutes; the rest goes to docs/"


def test_generated_blocks_have_their_markers():
    from mialab.evaluation.readme import BEGIN, END

    readme = (REPO / "README.md").read_text()
    assert readme.count(BEGIN) == 1 and readme.count(END) == 1 and readme.index(BEGIN) < readme.index(END)
    sweep = (REPO / "docs" / "sweep.md").read_text()
    assert re.search(r"<!-- sweep:begin \(scripts/readme_results\.py\) -->.*<!-- sweep:end -->", sweep, re.S)
