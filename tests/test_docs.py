"""The README and the manual in docs/ hold together: every relative link
names a file that exists, and every `#anchor` a heading of that file (as
GitHub makes heading anchors). That .ci/run runs the README's test command
is tests/test_lint.py's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.paths import REPO

PAGES = [REPO / "README.md", REPO / "ARCHITECTURE.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.M)


def anchors(page: Path) -> set[str]:
    """Its headings' anchors: lower case, punctuation dropped, spaces to
    hyphens; a repeated one gets -1, -2 ..."""
    seen: dict[str, int] = {}
    out = set()
    for title in HEADING.findall(FENCE.sub("", page.read_text())):
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text()))


def test_the_manual_is_linked_from_the_readme() -> None:
    linked = {(REPO / target.split("#")[0]).resolve() for target in links(REPO / "README.md")}
    assert [p.name for p in PAGES[2:] if p.resolve() not in linked] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no {file.relative_to(REPO)}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(REPO)}")
    assert broken == []


def test_the_anchors_follow_github_s_rule() -> None:
    page = REPO / "docs" / "scale-out.md"
    assert "more-machines-llamacpp-rpc-workers---rpc" in anchors(page)
    assert "an-upstream-engine---upstream" in anchors(page)
