"""A throwaway copy of the project for deploy tests that write files or add functions.

The copy holds the tracked sources (a `git ls-files` listing, so it looks like a fresh clone
with modification times kept, which keeps make's install stamps current) and links to the
worktree's venv and Firebase CLI. Nothing in it touches a cloud project.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINKED = ("venv", "tools/firebase/node_modules")


def copy_project(destination: Path) -> Path:
    """A copy of the project's tracked (and new, not ignored) files at `destination`."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    for name in listed:
        source = ROOT / name
        if not source.is_file():
            continue
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    for name in LINKED:
        (destination / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(ROOT / name, destination / name)
    return destination


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    """A fresh copy of the project (see the module docstring)."""
    return copy_project(tmp_path / "project")


def add_function(project: Path, module: str, source: str, name: str) -> None:
    """Add `functions/<module>.py` with `source` to a project copy and export `name` from its
    main.py (one line in its `FUNCTIONS`), as the README's "Adding a function" steps do."""
    (project / "functions" / f"{module}.py").write_text(source)
    main = project / "main.py"
    text = main.read_text()
    declared = "FUNCTIONS: dict[str, str] = {\n"
    assert declared in text, "main.py declares no FUNCTIONS table"
    main.write_text(text.replace(declared, f'{declared}    "{name}": "functions.{module}",\n'))
