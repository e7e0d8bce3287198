"""The soak tests start their own Firestore emulator (`soak.emulator`): they need neither the
shared emulators of `make test` nor /tmp/emulators.lock, so the shared database fixtures are
switched off here."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def clean_firestore() -> None:
    """Nothing to clean: each soak test owns its emulator."""


@pytest.fixture(autouse=True)
def emulator_triggers() -> None:
    """No Functions emulator is involved."""
