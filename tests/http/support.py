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
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from demo.serve import ROOT, free_port
from functions.receive_line_webhook import signature

AUTH_ENV = "FIREBASE_AUTH_EMULATOR_HOST"
LINE_SECRET = "test-line-channel-secret"
"""The channel secret `.secret.local` gives the Functions emulator (and the tests give theirs)."""
FUNCTIONS_FRAMEWORK = Path(sys.executable).parent / "functions-framework"


@dataclass(frozen=True)
class User:
    """A user of the Auth emulator with a fresh ID token."""

    uid: str
    id_token: str

    @property
    def bearer(self) -> dict[str, str]:
        """The Authorization header of this user's requests."""
        return {"Authorization": f"Bearer {self.id_token}"}


def sign_up(auth_host: str) -> User:
    """A new anonymous user of the Auth emulator (its REST API, as a client SDK signs up)."""
    response = requests.post(
        f"http://{auth_host}/identitytoolkit.googleapis.com/v1/accounts:signUp?key=fake-key",
        json={"returnSecureToken": True},
        timeout=30,
    )
    response.raise_for_status()
    body = response.json()
    return User(body["localId"], body["idToken"])


def new_key() -> str:
    """A fresh Idempotency-Key."""
    return str(uuid.uuid4())


def order_headers(user: User | None, key: str | None) -> dict[str, str]:
    """Headers of a JSON request by `user` (None: no token) with `key` (None: no header)."""
    headers = {"Content-Type": "application/json"}
    if user is not None:
        headers.update(user.bearer)
    if key is not None:
        headers["Idempotency-Key"] = key
    return headers


def line_body(*event_ids: str, redelivery: bool = False) -> bytes:
    """A LINE webhook body with one message event per id."""
    events = [
        {
            "type": "message",
            "mode": "active",
            "timestamp": 1700000000000,
            "source": {"type": "user", "userId": "U" + "0" * 32},
            "webhookEventId": event_id,
            "deliveryContext": {"isRedelivery": redelivery},
            "message": {"id": event_id[-8:], "type": "text", "text": f"hello {event_id}"},
            "replyToken": "r" * 32,
        }
        for event_id in event_ids
    ]
    return json.dumps({"destination": "U" + "1" * 32, "events": events}).encode()


def line_headers(body: bytes, secret: str = LINE_SECRET) -> dict[str, str]:
    """The headers LINE sends with `body`, signed with `secret`."""
    return {"Content-Type": "application/json", "X-Line-Signature": signature(body, secret)}


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
