"""README.md is a front page (at most 300 lines; the detail lives in docs/), and every link
of README.md and docs/*.md to a file of the repository reaches it, and to a heading, the
heading: its anchor as GitHub makes it. Every page of docs/ is linked from somewhere."""

import re
from pathlib import Path

import pytest

from helpers import REPO

README_MOST_LINES = 300
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens dropped, spaces
    as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {anchor(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def broken_links(page: Path) -> list:
    """The links of ``page`` to a missing file or heading (web addresses aside)."""
    broken = []
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(target)
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(target)
    return broken


def test_the_readme_is_a_front_page():
    assert len((REPO / "README.md").read_text().splitlines()) <= README_MOST_LINES


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_link_reaches_its_file_and_heading(page):
    assert broken_links(page) == []


def test_every_docs_page_is_linked():
    linked = {(page.parent / target.partition("#")[0]).resolve() for page in PAGES
              for target in LINK.findall(page.read_text())}
    assert [page.name for page in PAGES[1:] if page.resolve() not in linked] == []


def test_a_broken_link_is_caught(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other page\n\n## A (small) section\n")
    page.write_text("[ok](other.md#a-small-section) [web](https://x.org/a.md) "
                    "[gone](missing.md) [no heading](other.md#nothing) [here](#top)\n# Top\n")
    assert broken_links(page) == ["missing.md", "other.md#nothing"]
