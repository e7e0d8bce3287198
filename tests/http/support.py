"""What the HTTP tests share: Firebase users from the Auth emulator, requests with an
Idempotency-Key, LINE-signed webhook bodies, and a functions-framework server of an HTTP
function in a process of its own (for SIGKILLs).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demo.clients import (
    AUTH_ENV,
    LINE_SECRET,
    User,
    line_body,
    line_headers,
    new_key,
    order_headers,
    sign_up,
)
from demo.serve import ROOT, free_port

__all__ = [
    "AUTH_ENV",
    "LINE_SECRET",
    "HttpServer",
    "User",
    "http_server",
    "line_body",
    "line_headers",
    "new_key",
    "order_headers",
    "problem",
    "sign_up",
]

FUNCTIONS_FRAMEWORK = Path(sys.executable).parent / "functions-framework"


def problem(response: Any) -> dict[str, Any]:
    """The problem+json body of a refusal (asserting its content type)."""
    content_type = response.headers.get("Content-Type", "")
    assert content_type.startswith("application/problem+json"), content_type
    body: dict[str, Any] = json.loads(
        response.data if hasattr(response, "data") else response.content
    )
    return body


# --- A function server of its own ----------------------------------------------------------


@dataclass
class HttpServer:
    """functions-framework serving one HTTP function in its own process group."""

    url: str
    process: subprocess.Popen[bytes]

    def kill(self) -> None:
        """SIGKILL the whole process group, as a crashed instance."""
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


@contextmanager
def http_server(
    target: str,
    source: Path,
    env: Mapping[str, str],
    log: Path,
    *,
    signature_type: str = "http",
    asgi: bool = False,
) -> Iterator[HttpServer]:
    """Serve `target` of `source` (signature type http, or `signature_type`; under the ASGI
    server with `asgi`) on a free port until the block ends."""
    port = free_port()
    command = [
        str(FUNCTIONS_FRAMEWORK),
        "--source", str(source),
        "--target", target,
        "--signature-type", signature_type,
        "--host", "127.0.0.1",
        "--port", str(port),
        *(["--asgi"] if asgi else []),
    ]  # fmt: skip
    full_env = {**os.environ, "FUNCTION_TARGET": target, "PYTHONPATH": str(ROOT), **env}
    with log.open("ab") as output:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=full_env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = HttpServer(f"http://127.0.0.1:{port}/", process)
    try:
        _wait_until_listening(server, log)
        yield server
    finally:
        server.kill()


def _wait_until_listening(server: HttpServer, log: Path, timeout: float = 60.0) -> None:
    import socket
    import time

    port = int(server.url.rsplit(":", 1)[1].strip("/"))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"functions-framework exited before serving; see {log}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"functions-framework did not listen within {timeout:.0f} s; see {log}")
