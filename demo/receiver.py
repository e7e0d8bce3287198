"""A local HTTP receiver for webhooks and notifications, which records every request.

It stands in for a LINE bot, a partner's webhook endpoint or a push gateway: the demo and
the tests point `WEBHOOK_ROUTES` and `NOTIFY_URL` at it, then count what arrived. Every
attempt is recorded, whatever it was answered, with its `Idempotency-Key`. It can be scripted
to fail: answer a status, after a delay, to the next requests to a path; or stop listening
(`down()`: connections refused) and start again (`up()`).

Three views of what arrived, one name each:

* `attempts_to(path)`: every attempt to a path, whatever it was answered (what the sender did);
* `applied(path)`: the attempts answered 2xx (what a naive receiver applied);
* `effects(path)`: distinct `Idempotency-Key` values among the applied attempts (what an
  idempotent receiver keeps).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Attempt:
    """One request that reached the receiver, whatever it was answered."""

    path: str
    """The URL path, without its query string (tokens are not part of the route)."""
    idempotency_key: str | None
    content_type: str | None
    body: bytes
    status: int
    """What the receiver answered; a 2xx means it applied the effect, even after a delay
    the sender gave up on."""
    arrived: float
    """time.monotonic() at arrival."""
    headers: dict[str, str] = field(default_factory=dict)
    """Every request header (a Cloud Tasks dispatch's `X-CloudTasks-TaskName`, say)."""


@dataclass
class Receiver:
    """Recorded attempts and scripted answers; safe to use from many threads."""

    port: int = 0
    attempts: list[Attempt] = field(default_factory=list)
    _scripts: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:<port>`."""
        return f"http://127.0.0.1:{self.port}"

    def script(self, path: str, *answers: tuple[int, float]) -> None:
        """Answer the next requests to `path` with these (status, delay seconds), in order;
        then 200 at once."""
        with self._lock:
            self._scripts[path] = list(answers)

    def fail(self, path: str, status: int, times: int = 1, *, delay_seconds: float = 0.0) -> None:
        """Answer `status` (after `delay_seconds`) to the next `times` requests to `path`."""
        self.script(path, *[(status, delay_seconds)] * times)

    def reset(self) -> None:
        """Forget every attempt and script."""
        with self._lock:
            self.attempts.clear()
            self._scripts.clear()

    def attempts_to(self, path: str) -> list[Attempt]:
        """Every attempt to `path`, in arrival order, whatever it was answered."""
        with self._lock:
            return [a for a in self.attempts if a.path == path]

    def applied(self, path: str | None = None) -> list[Attempt]:
        """Attempts answered 2xx (to `path`, or to any path), in arrival order: what a naive
        receiver applied."""
        with self._lock:
            return [
                a
                for a in self.attempts
                if 200 <= a.status < 300 and (path is None or a.path == path)
            ]

    def effects(self, path: str | None = None) -> int:
        """What an idempotent receiver keeps: distinct idempotency keys among applied attempts."""
        return len({(a.path, a.idempotency_key) for a in self.applied(path)})

    def up(self) -> None:
        """Listen on `port` (a free one the first time if it is 0); nothing to do if up."""
        if self._server is not None:
            return
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                status, delay = receiver._record(self)
                time.sleep(delay)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: the demo prints its own table."""

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self._server = server

    def down(self) -> None:
        """Stop listening: new connections to the port are refused."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _record(self, request: BaseHTTPRequestHandler) -> tuple[int, float]:
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        path = urlsplit(request.path).path
        with self._lock:
            script = self._scripts.get(path)
            status, delay = script.pop(0) if script else (200, 0.0)
            self.attempts.append(
                Attempt(
                    path,
                    request.headers.get("Idempotency-Key"),
                    request.headers.get("Content-Type"),
                    body,
                    status,
                    time.monotonic(),
                    dict(request.headers.items()),
                )
            )
        return status, delay


@contextmanager
def running_receiver(port: int = 0) -> Iterator[Receiver]:
    """Serve a `Receiver` on 127.0.0.1:`port` (0: any free port) until the block ends."""
    receiver = Receiver(port)
    receiver.up()
    try:
        yield receiver
    finally:
        receiver.down()
