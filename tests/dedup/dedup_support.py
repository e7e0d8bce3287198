"""Support code shared by the dedup tests (kept out of conftest so tests can import it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

WORKER = Path(__file__).with_name("crash_worker.py")


def start_worker(*args: str) -> subprocess.Popen[str]:
    """Start crash_worker.py in its own process with the emulator environment."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
