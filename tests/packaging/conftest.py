"""What the packaging tests share: running a command, the sources a build reads, and one wheel
built from them per session (`pip wheel`), which the wheel test and the journey both install."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(
    *command: str | Path, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command; fail the test with its output if it fails."""
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return result


def library_source(destination: Path) -> Path:
    """A copy of what the package is built from (pyproject.toml, README.md, dedup/) at
    `destination`, so a build leaves nothing in the work tree."""
    destination.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, destination / name)
    shutil.copytree(
        ROOT / "dedup", destination / "dedup", ignore=shutil.ignore_patterns("__pycache__")
    )
    return destination


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `pip wheel --no-deps` builds from the sources, once per session."""
    work = tmp_path_factory.mktemp("wheel")
    source = library_source(work / "source")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", work / "dist", source)
    [wheel] = (work / "dist").glob("*.whl")
    return wheel
