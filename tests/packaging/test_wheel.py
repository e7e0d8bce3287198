"""The `dedup` library installs as a package: `pip wheel .`, then `pip install <wheel>[cli]`.

Slow (about a minute: a fresh venv gets the wheel and its dependencies from the configured
package index), so `make unit` leaves it out (`packaging` marker); `make test` runs it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.packaging


def run(*command: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command; fail the test with its output if it fails."""
    result = subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return result


def test_wheel_installs_the_library_and_the_dedup_command(tmp_path: Path) -> None:
    """A wheel built from the sources holds the `dedup` package (and nothing of the functions),
    installs with its runtime dependencies into a fresh venv, and with the `cli` extra puts a
    working `dedup` command on that venv's PATH."""
    source = tmp_path / "source"  # a copy, so the build leaves nothing in the work tree
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "dedup", source / "dedup", ignore=shutil.ignore_patterns("__pycache__"))
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "dist", source)
    [wheel] = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "dedup/__init__.py" in names
    assert "dedup/cli/__init__.py" in names
    assert "dedup/py.typed" in names
    assert not [n for n in names if n.startswith(("functions/", "main.py", "tests/", "demo/"))]

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    run(venv / "bin" / "python", "-m", "pip", "install", "-q", f"{wheel}[cli]")
    shown = run(venv / "bin" / "dedup", "--help", cwd=tmp_path)
    assert "Usage: dedup" in shown.stdout
    for command in ("show", "list", "release", "revive", "purge", "stats"):
        assert command in shown.stdout
    imported = run(
        venv / "bin" / "python",
        "-c",
        "import dedup, dedup.outbox; print(dedup.trigger_once.__name__, dedup.__file__)",
        cwd=tmp_path,
    )
    assert imported.stdout.startswith("trigger_once ")
    assert str(venv) in imported.stdout  # the installed copy, not the work tree's
