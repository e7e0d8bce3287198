"""The ports the suite and its moved copies use stay clear of the Functions emulator's workers
(tests/ports.py says why)."""

from __future__ import annotations

import json
import re

import pytest

from tests.deploy.test_emulator_signals import SHIFT as SIGNALS_SHIFT
from tests.named.test_functions_emulator import PORT_SHIFT as NAMED_SHIFT
from tests.plugin import receiver_port
from tests.ports import WORKER_BAND, in_worker_band
from tests.test_make_demo import PORT_SHIFT as DEMO_SHIFT
from tools.emulators import ROOT

EMULATOR = ROOT / "tools/firebase/node_modules/firebase-tools/lib/emulator/functionsEmulator.js"


def emulator_ports() -> list[int]:
    """Every port firebase.json gives an emulator (the Firestore websocket port included)."""
    config = json.loads((ROOT / "firebase.json").read_text())["emulators"]
    return [
        value
        for settings in config.values()
        if isinstance(settings, dict)
        for key, value in settings.items()
        if key in ("port", "websocketPort")
    ]


@pytest.mark.needs_emulators  # reads the installed Firebase CLI (make test installs it)
def test_worker_band_is_what_firebase_tools_uses() -> None:
    """The installed Functions emulator starts a Python worker's port search where WORKER_BAND
    says: `8081 + randomInt(0, 1000)`."""
    source = EMULATOR.read_text()
    python = source[source.index("async startPython(") :]
    start = re.search(r"port:\s*(\d+)\s*\+\s*\(0, utils_1\.randomInt\)\(0, (\d+)\)", python)
    assert start is not None, "startPython no longer picks a port the way tests/ports.py says"
    low, spread = int(start[1]), int(start[2])
    assert WORKER_BAND.start == low
    assert WORKER_BAND.stop > low + spread


def test_moved_copies_and_the_receiver_are_clear_of_the_workers() -> None:
    """The receiver of `.env.local`, and every port of the copies that `make demo`, the
    named-database and the emulator-signal tests move, lie outside WORKER_BAND (the session's
    own emulators bind theirs before any worker starts)."""
    ports = emulator_ports()
    receiver = receiver_port()
    assert in_worker_band([receiver]) == []
    assert in_worker_band(port + DEMO_SHIFT for port in [*ports, receiver]) == []
    assert in_worker_band(port + NAMED_SHIFT for port in ports) == []
    assert in_worker_band(port + SIGNALS_SHIFT for port in ports) == []
