"""Every relative link in the documents a reader starts from leads somewhere: a file or folder of
the checkout, and where it names a heading of a Markdown file (``#anchor``), that heading."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")),
             "benchmark/README.md", "benchmark/results/README.md"]
# [text](target) and ![alt](target), outside code spans; the target up to a space or ')'.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def links(text: str) -> list[str]:
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    return [target for target in LINK.findall(prose) if not re.match(r"[a-z]+:", target)]


def anchors(markdown: str) -> set[str]:
    """GitHub's anchor of each heading: lower case, punctuation but - and _ dropped, spaces to -."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", markdown, flags=re.S), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def broken(document: str, root: Path = ROOT) -> list[str]:
    path = root / document
    wrong = []
    for target in links(path.read_text(encoding="utf-8")):
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            wrong.append(f"{target}: no such file or folder")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text(encoding="utf-8")):
            wrong.append(f"{target}: no heading #{anchor} in {resolved.relative_to(root)}")
    return wrong


@pytest.mark.parametrize("document", DOCUMENTS)
def test_relative_links_resolve(document: str) -> None:
    assert broken(document) == []


def test_the_check_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title\n\n## Two words\n\n[ok](b/) [ok](#two-words) `[skip](nowhere)`\n"
                                   "[gone](nowhere.md) [gone](#three) [web](https://example.com)\n")
    (tmp_path / "b").mkdir()
    assert broken("a.md", tmp_path) == ["nowhere.md: no such file or folder", "#three: no heading #three in a.md"]
