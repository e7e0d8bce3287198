"""The unit workflow (`.github/workflows/unit.yml`) runs the README's `make unit` on every
Python version `make install` supports, each version's interpreter chosen with `PYTHON=`.

Read as text (no YAML parser is a dependency here)."""

from __future__ import annotations

import re
from pathlib import Path

from tools.runtime import supported_versions

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "unit.yml"


def test_it_runs_make_unit_on_every_supported_version() -> None:
    """The matrix is exactly tools/find-python.sh's versions (3.12, 3.13, 3.14), and its one
    command is the README's `make unit`, with the matrix's interpreter."""
    text = WORKFLOW.read_text()
    matrix = re.search(r"^ +python: \[(.*)\]$", text, flags=re.MULTILINE)
    assert matrix is not None, text
    versions = [v.strip().strip('"') for v in matrix.group(1).split(",")]
    assert sorted(versions) == sorted(supported_versions()) == ["3.12", "3.13", "3.14"]
    assert "python-version: ${{ matrix.python }}" in text
    runs = re.findall(r"^ +- run: (.*)$", text, flags=re.MULTILINE)
    assert runs == ["make unit PYTHON=${{ steps.python.outputs.python-path }}"]
    assert "make unit" in (ROOT / "README.md").read_text()
    assert re.search(r"^on: \[push, pull_request\]$", text, flags=re.MULTILINE)
