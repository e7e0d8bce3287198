"""The soak's own Firestore emulator, which it can restart without losing a committed write.

The gcloud `cloud-firestore-emulator` jar is started directly (launcher jar and Java >= 21
found as `tools/emulators.py` does) on a free port, behind a `soak.proxy.Proxy`. It keeps its
data in memory, so a plain restart would delete every dedup record, which no deduplication can
survive and no real database does. A restart is therefore:

1. `Proxy.cut()`: every connection drops; requests in flight may have been applied, their
   responses are lost (an outage as clients see it). New connections wait.
2. `POST /emulator/v1/projects/<p>:export` straight to the emulator (not through the proxy):
   nothing can write any more, so the export holds every write the emulator applied.
3. SIGKILL the emulator, start a new one on a new port with `--seed_from_export`.
4. `Proxy.resume(<new port>)`: clients reconnect.

One difference from a durable database remains, measured and documented in docs/soak.md: an
import gives every document a new update time, so a fencing token (update time) taken before
the restart no longer matches. Deliveries in flight during a restart may therefore lose their
lease (`LeaseLost`) and be redelivered; their effect's key is unchanged.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from demo.serve import free_port
from soak.proxy import Proxy
from tools import emulators

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_SECONDS = 60.0


class EmulatorError(Exception):
    """The emulator could not be started or exported; the message says what to install."""


def emulator_command() -> list[str]:
    """`java -jar <launcher>` for the gcloud Firestore emulator component."""
    binaries = emulators.offline_emulator_binaries()
    launcher = binaries.get("FIRESTORE_EMULATOR_BINARY_PATH")
    if launcher is None:
        raise EmulatorError(
            "the soak starts the gcloud Firestore emulator itself: install it with "
            "`gcloud components install cloud-firestore-emulator` (or apt's "
            "google-cloud-cli-firestore-emulator)"
        )
    java = emulators.find_java()
    return [str(java), "-jar", launcher]


class SoakEmulator:
    """A Firestore emulator the soak owns: `start`, `restart` (data kept), `stop`.

    Clients use `host` (the proxy); `direct_host` bypasses the proxy, for the final checks.
    """

    def __init__(self, project: str, workdir: Path) -> None:
        """Prepare an emulator for `project`, keeping logs and exports under `workdir`."""
        self.project = project
        self.workdir = workdir
        self.restarts = 0
        """Completed restarts."""
        self._command = emulator_command()
        self._process: subprocess.Popen[bytes] | None = None
        self._port = 0
        self._proxy: Proxy | None = None

    @property
    def host(self) -> str:
        """host:port of the proxy: what function processes use as FIRESTORE_EMULATOR_HOST."""
        if self._proxy is None:
            raise EmulatorError("the emulator is not started: call start() first")
        return self._proxy.address

    @property
    def direct_host(self) -> str:
        """host:port of the emulator itself (changes at every restart)."""
        return f"127.0.0.1:{self._port}"

    def start(self) -> None:
        """Start the emulator and the proxy in front of it."""
        self._launch(seed=None)
        self._proxy = Proxy(("127.0.0.1", self._port))

    def restart(self) -> float:
        """Cut clients off, export, kill, start from the export, reconnect; returns the outage
        length in seconds. Raises `EmulatorError` if the new emulator does not come up."""
        assert self._proxy is not None
        began = time.monotonic()
        self._proxy.cut()
        time.sleep(0.2)  # let requests already inside the emulator finish before the export
        export = Path(tempfile.mkdtemp(prefix="export-", dir=self.workdir))
        try:
            metadata = self._export(export)
        except Exception:
            self._proxy.resume(("127.0.0.1", self._port))  # not restarted: serve on
            raise
        self._kill()
        self._launch(seed=metadata)
        self._proxy.resume(("127.0.0.1", self._port))
        shutil.rmtree(export, ignore_errors=True)
        self.restarts += 1
        return time.monotonic() - began

    def cut(self) -> None:
        """An outage without a restart: drop every client connection and hold new ones (their
        calls wait, unanswered) until `resume`."""
        assert self._proxy is not None
        self._proxy.cut()

    def resume(self) -> None:
        """End an outage begun by `cut`: serve the held connections and new ones."""
        assert self._proxy is not None
        self._proxy.resume(("127.0.0.1", self._port))

    def stop(self) -> None:
        """Stop the proxy and the emulator."""
        if self._proxy is not None:
            self._proxy.close()
        self._kill()

    def _export(self, directory: Path) -> Path:
        url = f"http://{self.direct_host}/emulator/v1/projects/{self.project}:export"
        body = json.dumps(
            {
                "database": f"projects/{self.project}/databases/(default)",
                "export_directory": str(directory),
            }
        ).encode()
        request = urllib.request.Request(
            url, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            response.read()
        found = sorted(directory.rglob("*.overall_export_metadata"))
        if not found:
            raise EmulatorError(f"the emulator's export in {directory} wrote no metadata file")
        return found[0]

    def _launch(self, seed: Path | None) -> None:
        self._port = free_port()
        args = [
            *self._command,
            "--host",
            "127.0.0.1",
            "--port",
            str(self._port),
            "--project_id",
            self.project,
        ]
        if seed is not None:
            args.append(f"--seed_from_export={seed}")
        log = (self.workdir / "firestore-emulator.log").open("ab")
        self._process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"http://{self.direct_host}/", timeout=2) as answer,
            ):
                if answer.status == 200:
                    return
            time.sleep(0.2)
        self._kill()
        raise EmulatorError(
            f"the Firestore emulator did not come up on port {self._port}: see "
            f"{self.workdir / 'firestore-emulator.log'}"
        )

    def _kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._process = None
