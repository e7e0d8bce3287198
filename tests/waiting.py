"""Waiting for what the emulators do in the background (triggers, task dispatches)."""

from __future__ import annotations

import time
from collections.abc import Callable

WAIT_SECONDS = 90.0
"""How long a background effect may take on a loaded machine before a test gives up."""


def eventually(
    check: Callable[[], object], what: str, seconds: float = WAIT_SECONDS, poll: float = 0.25
) -> None:
    """Return as soon as `check()` is truthy; `AssertionError` naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(poll)
    raise AssertionError(f"after {seconds:g} s: {what}")
