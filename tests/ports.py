"""Where a test may move the emulators' ports: clear of the ports the Functions emulator gives
its Python workers.

The Functions emulator starts one `functions-framework` process per function (and per concurrent
invocation) and gives each a port found by portfinder, starting at `8081 + randomInt(0, 1000)`
and going up from there while a port is taken (firebase-tools 15.34.2,
`lib/emulator/functionsEmulator.js`, `startPython`). The workers of the test session's emulator
live until the session ends, so by the end of `make test` dozens of ports between 8081 and a
little above 9081 are held at random. A copy of the project whose emulators are moved into that
band fails at random with "Port ... is already in use".
`test_worker_band_is_what_firebase_tools_uses` (tests/test_ports.py) reads the installed
firebase-tools, so a change of that band is noticed.
"""

from __future__ import annotations

from collections.abc import Iterable

WORKER_BAND = range(8081, 9200)
"""The ports the Functions emulator's Python workers may take: its random start (8081 to 9081)
plus room for portfinder's upward search past taken ports."""


def in_worker_band(ports: Iterable[int]) -> list[int]:
    """The given ports that lie in `WORKER_BAND`, sorted (none: they are safe to move to)."""
    return sorted(port for port in ports if port in WORKER_BAND)
