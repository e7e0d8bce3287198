"""The release workflow (`.github/workflows/release.yml`) publishes only what passed: on a
`v*` tag, lint and the unit tests, then `python -m build`, then PyPI's trusted publishing.

Read as text (no YAML parser is a dependency here): each job's block is the lines under its
name, up to the next job."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def jobs() -> dict[str, str]:
    """Each job's name and the text of its block."""
    text = WORKFLOW.read_text()
    body = text.split("\njobs:\n", 1)[1]
    found = re.split(r"^  ([a-z-]+):\n", body, flags=re.MULTILINE)[1:]
    return dict(zip(found[::2], found[1::2], strict=True))


def test_a_version_tag_runs_the_unit_tests_then_builds_then_publishes() -> None:
    text = WORKFLOW.read_text()
    assert re.search(r"on:\n  push:\n    tags: \[\"v\*\"\]\n", text)
    found = jobs()
    assert list(found) == ["test", "build", "publish"]
    assert "make lint unit" in found["test"]
    assert "needs: test" in found["build"]
    assert "python -m build" in found["build"]
    assert "needs: build" in found["publish"]
    assert "uses: pypa/gh-action-pypi-publish@release/v1" in found["publish"]


def test_publishing_is_trusted_and_nothing_else_gets_the_token() -> None:
    """Only the publish job may ask for the OIDC token; no password or API token is used."""
    text = WORKFLOW.read_text()
    found = jobs()
    assert "id-token: write" in found["publish"]
    assert "id-token" not in found["test"] + found["build"]
    assert re.search(r"^permissions:\n  contents: read\n", text, flags=re.MULTILINE)
    assert "password" not in text
    assert "secrets." not in text


def test_the_tag_must_match_the_packages_version_and_build_is_pinned() -> None:
    found = jobs()
    assert '"v$version" != "$GITHUB_REF_NAME"' in found["build"]
    pinned = re.search(r"build==(\S+)", found["build"])
    assert pinned is not None
    dev = (ROOT / "requirements-dev.txt").read_text().splitlines()
    assert f"build=={pinned.group(1)}" in dev
