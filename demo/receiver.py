"""A local HTTP receiver for webhooks and notifications, which records every request.

It stands in for a LINE bot, a partner's webhook endpoint or a push gateway: the demo and
the tests point `WEBHOOK_ROUTES` and `NOTIFY_URL` at it, then count what arrived. It can be
told to fail: answer a status for the next N requests to a path, or answer slowly.

It counts both what a naive receiver would see (`requests`) and what an idempotent one keeps
(`effects`: distinct `Idempotency-Key` values per path).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Received:
    """One request the receiver answered with 2xx."""

    path: str
    idempotency_key: str | None
    content_type: str | None
    body: bytes


@dataclass
class _Fault:
    status: int
    remaining: int
    delay_seconds: float = 0.0


@dataclass
class Receiver:
    """Recorded requests and scripted faults; safe to use from many threads."""

    port: int = 0
    received: list[Received] = field(default_factory=list)
    attempts: Counter[str] = field(default_factory=Counter)
    _faults: dict[str, _Fault] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:<port>`."""
        return f"http://127.0.0.1:{self.port}"

    def fail(self, path: str, status: int, times: int = 1, *, delay_seconds: float = 0.0) -> None:
        """Answer `status` (after `delay_seconds`) to the next `times` requests to `path`."""
        with self._lock:
            self._faults[path] = _Fault(status, times, delay_seconds)

    def reset(self) -> None:
        """Forget every request and fault."""
        with self._lock:
            self.received.clear()
            self.attempts.clear()
            self._faults.clear()

    def requests(self, path: str | None = None) -> list[Received]:
        """Successful requests, to `path` or to any path."""
        with self._lock:
            return [r for r in self.received if path is None or r.path == path]

    def effects(self, path: str | None = None) -> int:
        """What an idempotent receiver keeps: distinct idempotency keys (per path)."""
        return len({(r.path, r.idempotency_key) for r in self.requests(path)})

    def _answer(self, request: BaseHTTPRequestHandler) -> tuple[int, float]:
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length)
        path = urlsplit(request.path).path  # query strings (tokens) are not part of the route
        with self._lock:
            self.attempts[path] += 1
            fault = self._faults.get(path)
            if fault and fault.remaining > 0:
                fault.remaining -= 1
                return fault.status, fault.delay_seconds
            self.received.append(
                Received(
                    path,
                    request.headers.get("Idempotency-Key"),
                    request.headers.get("Content-Type"),
                    body,
                )
            )
        return 200, 0.0


@contextmanager
def running_receiver(port: int = 0) -> Iterator[Receiver]:
    """Serve a `Receiver` on 127.0.0.1:`port` (0: any free port) until the block ends."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            status, delay = receiver._answer(self)
            if delay:
                time.sleep(delay)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the demo prints its own table."""

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
