"""Fixtures of the HTTP tests besides tests/plugin.py's (`user`, `http_function`...): the LINE
channel secret, and the functions source with crash points."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.http.support import LINE_SECRET

ROOT = Path(__file__).resolve().parents[2]
MAIN = str(ROOT / "main.py")
SERVED = str(Path(__file__).resolve().parent / "served.py")
"""The HTTP functions with crash points (and the test endpoints), as a functions source."""


@pytest.fixture(autouse=True)
def line_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """The channel secret the served LINE endpoint verifies with."""
    monkeypatch.setenv("LINE_CHANNEL_SECRET", LINE_SECRET)
