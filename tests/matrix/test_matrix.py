"""The conformance matrix: every mode x every trigger kind x every failure point
(`tests.matrix.cases`), on the in-memory store in `make unit`, and the same matrix on the
Firestore emulator in `make test`, where each case is played on both and must end alike.

Invariant: whatever the trigger kind, a delivery of an event ends as its mode's row says (the
answers the platform gets, the record's state and attempts, how many effects happened); and
the in-memory store is trusted only because every case ends the same on the emulator.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from google.cloud import firestore

from dedup import Mode
from tests.matrix.backends import EmulatorBackend, MemoryBackend, play
from tests.matrix.cases import POINTS
from tests.matrix.kinds import KINDS
from tests.memory_store import no_faults


def _cases() -> Iterator[tuple[Mode, str, str]]:
    for mode, kind, (name, point) in itertools.product(Mode, KINDS, POINTS.items()):
        if point.kinds is None or kind in point.kinds:
            yield mode, kind, name


CASES = list(_cases())
"""(mode, kind, point) of every case."""
IDS = [f"{mode.value}-{kind}-{name}" for mode, kind, name in CASES]


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries pause a millisecond at most: the matrix checks what the flows decide, not how
    long they wait (the same on both backends)."""
    monkeypatch.setattr("dedup.kernel.store.BACKOFF_CAP_SECONDS", 0.001)


@pytest.mark.parametrize(("mode", "kind", "name"), CASES, ids=IDS)
def test_in_memory(mode: Mode, kind: str, name: str) -> None:
    """On the in-memory store, every trigger kind ends the case as its mode's row says."""
    point = POINTS[name]
    backend = MemoryBackend(point.faults.get(mode, no_faults))
    assert play(backend, mode, kind, point) == point.expected[mode]


@pytest.mark.parametrize(("mode", "kind", "name"), CASES, ids=IDS)
def test_on_emulator_agrees(
    firestore_client: firestore.Client, mode: Mode, kind: str, name: str
) -> None:
    """On the Firestore emulator, the case ends as its row says, and as on the in-memory
    store: the fake is right wherever the matrix looks."""
    point = POINTS[name]
    plan = point.faults.get(mode, no_faults)
    on_emulator = play(EmulatorBackend(plan, firestore_client), mode, kind, point)
    in_memory = play(MemoryBackend(plan), mode, kind, point)
    assert on_emulator == in_memory
    assert on_emulator == point.expected[mode]


def test_matrix_covers_every_mode_kind_and_point() -> None:
    """The matrix is complete: every mode and kind, every point (too old: kinds with a time)."""
    assert {(m, k) for m, k, _ in CASES} == set(itertools.product(Mode, KINDS))
    assert {n for _, _, n in CASES} == set(POINTS)
    assert len(CASES) == len(Mode) * (len(KINDS) * (len(POINTS) - 1) + 3)
