"""The soak's own emulator and fault injection do what the soak's figures assume."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud import firestore

from soak.emulator import SoakEmulator
from soak.faults import LostResponses, faulty_client

pytestmark = pytest.mark.own_emulators  # its own Firestore emulator

PROJECT = "demo-soak-test"


@pytest.fixture
def emulator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SoakEmulator]:
    """A soak emulator of this test, clients pointed at its proxy."""
    own = SoakEmulator(PROJECT, tmp_path)
    own.start()
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", own.host)
    try:
        yield own
    finally:
        own.stop()


def test_a_restart_keeps_every_committed_write(emulator: SoakEmulator) -> None:
    """An emulator restart is an outage, never a loss: every acknowledged write survives."""
    client = firestore.Client(project=PROJECT)
    for i in range(30):
        client.collection("kept").document(f"d{i}").set({"n": i})
    emulator.restart()
    emulator.restart()
    client = firestore.Client(project=PROJECT)
    kept = {d.id: d.get("n") for d in client.collection("kept").stream()}
    assert kept == {f"d{i}": i for i in range(30)}
    assert emulator.restarts == 2


def test_a_lost_commit_response_applies_the_write_and_reports_an_error(
    emulator: SoakEmulator,
) -> None:
    """The interceptor lets the commit through and hides its success: an ambiguous commit."""
    faults: list[str] = []
    lossy = faulty_client(
        LostResponses(write_rate=1.0, read_rate=0.0, on_fault=faults.append), PROJECT
    )
    with pytest.raises((api_exceptions.ServiceUnavailable, api_exceptions.GatewayTimeout)):
        lossy.collection("lost").document("d").create({"n": 1}, retry=None)
    assert len(faults) == 1
    assert faults[0].startswith("lost-Commit-")
    plain = firestore.Client(project=PROJECT)
    assert plain.collection("lost").document("d").get().to_dict() == {"n": 1}
    assert os.environ["FIRESTORE_EMULATOR_HOST"] == emulator.host
