"""README.md stays short, and every relative link of README.md and docs/ leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#+ (.+)$", re.MULTILINE)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_readme_is_at_most_250_lines() -> None:
    """The README is the front page: details live in docs/, linked from it."""
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines"


def test_every_relative_link_and_anchor_exists() -> None:
    """A link to a file names one that exists; a link with `#anchor` names a heading there."""
    broken: list[str] = []
    for document in documents():
        for target in LINK.findall(document.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path, _, fragment = target.partition("#")
            linked = (document.parent / path).resolve()
            if not linked.exists():
                broken.append(f"{document.relative_to(ROOT)}: {target}")
            elif fragment and linked.suffix == ".md":
                anchors = {anchor(h) for h in HEADING.findall(linked.read_text())}
                if fragment not in anchors:
                    broken.append(f"{document.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == [], broken
