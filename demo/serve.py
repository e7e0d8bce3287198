"""Serve one function from `main.py` the way Cloud Run does, and deliver events to it.

`served_function` starts `functions-framework --target NAME --signature-type cloudevent` (or
`http`, for a task-queue function) in its own process group (gunicorn may fork workers) and
kills the whole group when the block ends, or when the caller kills it on purpose to simulate a
crash.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import requests

from demo.events import HttpEvent

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS_FRAMEWORK = Path(sys.executable).parent / "functions-framework"


FREE_PORTS = range(10_000, 28_000)
"""Where `free_port` looks: below Linux's ephemeral range (32768 to 60999 by default), above
the emulators' fixed ports and the band the Functions emulator gives its workers (8081 to
9200, `tests.ports`)."""


def free_port() -> int:
    """A TCP port nobody listens on right now, which no outgoing connection can take.

    Asking the kernel for port 0 hands out a port of its ephemeral range, the same range it
    takes the local ends of outgoing connections from. On a busy machine (a storm test opens
    thousands of connections) one of those took the port between this answer and the server's
    bind, and the server (a Firestore emulator) exited with "Address already in use". A port
    of `FREE_PORTS`, below that range, is taken only by whoever asks for it by number.
    """
    for _ in range(1000):
        port = random.choice(FREE_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {FREE_PORTS.start}..{FREE_PORTS.stop - 1}")


def free_ports(count: int) -> list[int]:
    """`count` different ports, each as `free_port` finds one: a server set up with several
    (an emulator suite's hub, Eventarc, Cloud Tasks...) never gets one port twice, which
    `free_port` called that many times may give."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


@dataclass
class ServedFunction:
    """A running function server: its URL and process."""

    name: str
    url: str
    process: subprocess.Popen[bytes]

    def deliver(self, event: HttpEvent, *, timeout: float = 60.0) -> int:
        """POST the event once; the HTTP status (2xx: the platform stops retrying)."""
        return requests.post(
            self.url, data=event.body, headers=dict(event.headers), timeout=timeout
        ).status_code

    def kill(self) -> None:
        """SIGKILL the server's whole process group, as a crashed instance."""
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


def _wait_until_listening(port: int, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"functions-framework exited with {process.returncode} before serving"
            )
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"functions-framework did not listen on port {port} within {timeout:.0f} s")


@contextmanager
def served_function(
    name: str,
    env: Mapping[str, str] | None = None,
    *,
    log: Path | None = None,
    timeout: float = 30.0,
    source: Path | None = None,
    signature_type: str = "cloudevent",
) -> Iterator[ServedFunction]:
    """Serve function `name` from main.py (or from `source`) on a free port until the block ends.

    `signature_type` is `cloudevent` for the event functions, `http` for task-queue ones.

    `env` is added to this process's environment (emulator hosts are inherited). Output goes
    to `log` when given, else is discarded.
    """
    port = free_port()
    command = [
        str(FUNCTIONS_FRAMEWORK),
        "--source", str(source or ROOT / "main.py"),
        "--target", name,
        "--signature-type", signature_type,
        "--host", "127.0.0.1",
        "--port", str(port),
    ]  # fmt: skip
    full_env = {**os.environ, "FUNCTION_TARGET": name, **(env or {})}
    output = log.open("ab") if log else subprocess.DEVNULL
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=full_env,
        stdout=output,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    served = ServedFunction(name, f"http://127.0.0.1:{port}/", process)
    try:
        _wait_until_listening(port, process, timeout)
        yield served
    finally:
        served.kill()
        if log and not isinstance(output, int):
            output.close()
