"""The fault tests' own Firestore emulator starts even when its port is taken first.

A storm's thousands of outgoing connections took an ephemeral port between `free_port` and the
emulator's bind, and the storm test failed with "the Firestore emulator exited". `free_port`
now looks below the ephemeral range, and `own_firestore` gives a taken port up for another.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import demo.own_firestore
import demo.serve
from demo.own_firestore import OwnFirestore, PortTaken, find_java, own_firestore
from demo.serve import FREE_PORTS, free_port

pytestmark = pytest.mark.own_emulators  # starts Firestore emulators of its own


def test_free_ports_lie_below_the_ephemeral_range() -> None:
    """It is impossible for `free_port` to hand out a port an outgoing connection may take."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert FREE_PORTS.stop <= low
    assert all(free_port() in FREE_PORTS for _ in range(50))


def test_ports_asked_for_together_are_all_different(monkeypatch: pytest.MonkeyPatch) -> None:
    """`free_ports` never hands out one port twice, even when the random draw repeats one
    (it did: a test's emulator hub and Eventarc emulator were given one port, and the Eventarc
    emulator moved to another, where no event reached it)."""
    draws = iter([20_001, 20_001, 20_002, 20_001, 20_003])
    monkeypatch.setattr(demo.serve.random, "choice", lambda _: next(draws))
    assert demo.serve.free_ports(3) == [20_001, 20_002, 20_003]


def test_a_taken_port_is_given_up_for_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An emulator whose port was bound by another process first starts on another port, and
    one started on a taken port by hand says why it exited."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        with pytest.raises(PortTaken, match="Address already in use"):
            OwnFirestore(port, tmp_path, find_java()).start()
        ports = iter([port])
        monkeypatch.setattr(demo.own_firestore, "free_port", lambda: next(ports, free_port()))
        with own_firestore(tmp_path) as emulator:
            assert emulator.port != port
            emulator.client().document("probe/one").set({"ok": True})
