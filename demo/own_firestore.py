"""A Firestore emulator of one's own: started right before a measurement or a test (cold), on
a free port, stoppable and restartable. Used by the fault tests (`tests.faults`) and the
benchmark's cold storm (`bench.storm`); `make test` and `make bench` build the launcher jar it
starts (`tools.emulators`).
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import requests
from google.cloud import firestore

from demo.serve import ROOT, free_port

PROJECT = "demo-exactly-once"
FIRESTORE_LAUNCHER = ROOT / ".cache" / "cloud-firestore-emulator-launcher.jar"
"""Written by `tools.emulators` when the emulators start (`make test`, `make bench`)."""


def find_java() -> str:
    """A Java >= 21, found the way `make test` and `make bench` find it."""
    from tools import emulators

    return str(emulators.find_java())


@dataclass
class OwnFirestore:
    """A Firestore emulator on a port of its own, which the test may stop and restart.

    The emulator keeps data in memory and does not honour `--export-on-exit` when signalled,
    so `stop()` first exports through the emulator's REST endpoint (what `firebase
    emulators:export` calls), then SIGKILLs it; `start()` seeds a new one from that export.
    """

    port: int
    workdir: Path
    java: str
    process: subprocess.Popen[bytes] | None = None
    exports: int = 0

    @property
    def host(self) -> str:
        """`127.0.0.1:<port>`, for FIRESTORE_EMULATOR_HOST."""
        return f"127.0.0.1:{self.port}"

    def client(self) -> firestore.Client:
        """A new Firestore client talking to this emulator.

        Built in emulator mode (the session's FIRESTORE_EMULATOR_HOST is set), then pointed
        here before its first call: os.environ is shared with threads starting servers.
        """
        client = firestore.Client(project=PROJECT)
        client._emulator_host = self.host
        return client

    def _latest_export(self) -> str | None:
        found = sorted(
            glob.glob(str(self.workdir / "export-*" / "*" / "*.overall_export_metadata"))
        )
        return found[-1] if found else None

    def start(self, *, within: float = 60.0) -> float:
        """Start (seeded from the last export, if any); seconds until it answered."""
        started = time.monotonic()
        command = [self.java, "-jar", str(FIRESTORE_LAUNCHER), "--host=127.0.0.1"]
        command.append(f"--port={self.port}")
        if (seed := self._latest_export()) is not None:
            command.append(f"--seed_from_export={seed}")
        log = (self.workdir / "firestore.log").open("ab")
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        while time.monotonic() - started < within:
            if self.process.poll() is not None:
                raise self._exited()
            with suppress(requests.RequestException):
                if requests.get(f"http://{self.host}/", timeout=1).ok:
                    return time.monotonic() - started
            time.sleep(0.1)
        raise RuntimeError(f"the Firestore emulator did not answer within {within:.0f} s")

    def _exited(self) -> RuntimeError:
        """The error for an emulator that exited while starting, with its log's last lines."""
        log = (self.workdir / "firestore.log").read_text(errors="replace").splitlines()
        cause = next((line for line in log if "Exception" in line), "no exception logged")
        error = PortTaken if "Address already in use" in cause else RuntimeError
        return error(
            f"the Firestore emulator on port {self.port} exited: {cause}; see {self.workdir}"
        )

    def stop(self) -> None:
        """Export the data, then kill the emulator: every RPC to it now fails."""
        self.exports += 1
        directory = self.workdir / f"export-{self.exports:02d}"
        directory.mkdir()
        requests.post(
            f"http://{self.host}/emulator/v1/projects/{PROJECT}:export",
            json={
                "database": f"projects/{PROJECT}/databases/(default)",
                "export_directory": str(directory),
            },
            timeout=30,
        ).raise_for_status()
        self.kill()

    def kill(self) -> None:
        """SIGKILL the emulator's process group, without exporting."""
        if self.process is not None:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self.process = None


class PortTaken(RuntimeError):
    """The emulator could not bind its port: another process took it first."""


@contextmanager
def own_firestore(workdir: Path) -> Iterator[OwnFirestore]:
    """A running `OwnFirestore` on a free port, killed when the block ends.

    A port another process binds between `free_port` and the emulator's start is given up for
    another one (three tries); any other exit while starting raises with the emulator's error.
    """
    for tries_left in reversed(range(3)):
        emulator = OwnFirestore(free_port(), workdir, find_java())
        try:
            emulator.start()
            break
        except PortTaken:
            if not tries_left:
                raise
    try:
        yield emulator
    finally:
        emulator.kill()
