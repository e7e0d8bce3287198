"""What the packaging tests share: running a command, the sources a build reads, and one wheel
built from them per session (`pip wheel`), which the wheel test and the journey both install."""

from __future__ import annotations

import json
import os
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


def python_313() -> str:
    """A Python 3.13 (the runtime `firebase init functions` gives), as `make install` finds
    one (tools/find-python.sh, whose first choice is 3.13)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    found = run("sh", ROOT / "tools" / "find-python.sh", env=env).stdout.strip()
    version = run(found, "-c", "import sys; print(sys.version_info[:2])").stdout.strip()
    assert version == "(3, 13)", f"the journey runs on 3.13: install one ({found} is {version})"
    return found


FIREBASE_INIT_REQUIREMENTS = "firebase_functions~=0.5.0\n"
"""What `firebase init functions` writes into functions/requirements.txt today."""


def firebase_init_folder(app: Path, requirements: str = FIREBASE_INIT_REQUIREMENTS) -> Path:
    """The shape `firebase init functions` gives `app`: `firebase.json` (Python 3.13) and
    `functions/requirements.txt`; the functions folder."""
    functions = app / "functions"
    functions.mkdir(parents=True)
    (app / "firebase.json").write_text(
        json.dumps({"functions": [{"source": "functions", "runtime": "python313"}]})
    )
    (functions / "requirements.txt").write_text(requirements)
    return functions


def new_user_environment(**extra: str) -> dict[str, str]:
    """This process's environment as a new user's shell has it, with `extra`: no project
    variable (GOOGLE_CLOUD_PROJECT, GCLOUD_PROJECT), no DEDUP_* setting, no template on the
    path; the emulators' hosts kept."""
    dropped = ("GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("DEDUP_")}
    return {**env, **extra}


@pytest.fixture(scope="session")
def firebase_init_project(
    tmp_path_factory: pytest.TempPathFactory, built_wheel: Path
) -> tuple[Path, Path]:
    """(functions folder, venv bin) of a `firebase init functions` project outside the
    repository on Python 3.13: `firebase.json`, `functions/requirements.txt` with
    `firebase_functions~=0.5.0`, and a venv with that file, the wheel (with its `cli` extra) and
    functions-framework installed in one resolution (pip would stop with ResolutionImpossible
    if they could not go together). Made once per session: the journeys write their own
    main.py or project beside it."""
    functions = firebase_init_folder(tmp_path_factory.mktemp("first-hour") / "my-app")
    venv = functions / "venv"
    run(python_313(), "-m", "venv", venv)
    bin_ = venv / "bin"
    run(
        bin_ / "python", "-m", "pip", "install", "-q", "-r", functions / "requirements.txt",
        f"{built_wheel}[cli]", "functions-framework",
    )  # fmt: skip
    return functions, bin_
