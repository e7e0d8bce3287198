"""The under-load helpers of docs/testing.md: `tools/busy.py` runs a command beside busy loops
and ends every loop it started; `tools/repeat.py` runs each selected test N times in a row."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tools.busy import busy, main

ROOT = Path(__file__).resolve().parents[1]


def test_busy_loops_spin_during_the_block_and_are_gone_after() -> None:
    """Each loop is alive inside the block and reaped (no zombie, no orphan) after it, even
    when the block raises."""
    try:
        with busy(2) as loops:
            assert len(loops) == 2
            assert all(loop.poll() is None for loop in loops)
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert all(loop.returncode is not None for loop in loops)  # killed and waited for


def test_the_commands_status_is_returned() -> None:
    """`python -m tools.busy 1 -- CMD` exits with CMD's status."""
    assert main(["1", "--", sys.executable, "-c", "raise SystemExit(7)"]) == 7
    assert main(["0", "--", sys.executable, "-c", "pass"]) == 0


def test_repeat_runs_each_test_n_times_in_a_row(tmp_path: Path) -> None:
    """`-p tools.repeat --repeat 3` runs a test three times; `-x` stops at the first failure."""
    (tmp_path / "test_sample.py").write_text(
        "calls = []\n"
        "def test_once():\n"
        "    calls.append(1)\n"
        "def test_third_fails():\n"
        "    calls.append(2)\n"
        "    assert calls.count(2) < 3\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tools.repeat", "-q"]
    done = subprocess.run(
        [*base, "--repeat", "3", "test_sample.py::test_once"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout
    stopped = subprocess.run(
        [*base, "-x", "--repeat", "5", "test_sample.py::test_third_fails"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert stopped.returncode == 1
    assert "1 failed, 2 passed" in stopped.stdout
    assert "test_third_fails[3-of-5]" in stopped.stdout
