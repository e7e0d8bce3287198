"""`dedup.send.post_once` against a real local HTTP server: the key and content type are sent,
each answer is classified (2xx returned; 5xx, 408, 425, 429, timeouts, refused and cut-off
connections retryable; any other 4xx terminal), and no error, traceback or log line shows the
URL's credentials or query string."""

from __future__ import annotations

import logging
import socket
import threading
import time
import traceback
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests

from dedup import TerminalError, send
from dedup.send import ReceiverUnavailable, post_once

SECRETS = ("secret-token", "secret-pw")


class _Receiver(BaseHTTPRequestHandler):
    """Answers POST /<status> with that status; /slow sleeps first; /cut closes the
    connection without an answer. Records each request's headers."""

    def do_POST(self) -> None:
        server: Any = self.server
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        server.seen.append({k.lower(): v for k, v in self.headers.items()})
        name = self.path.split("?", 1)[0].strip("/")
        if name == "slow":
            time.sleep(1.0)
            name = "200"
        if name == "cut":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.send_response(int(name))
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    server.seen = []
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    server.base = f"127.0.0.1:{server.server_address[1]}"
    yield server
    server.shutdown()
    server.server_close()


def url(receiver: Any, path: str) -> str:
    """A URL of the receiver with credentials and a token in the query, as webhook URLs have."""
    return f"http://user:secret-pw@{receiver.base}/{path}?token=secret-token&x=1"


def post(target: str, session: requests.Session | None = None) -> requests.Response:
    return post_once(
        target,
        b'{"a": 1}',
        content_type="application/json",
        idempotency_key="e1-notify",
        session=session,
        headers={"X-Extra": "1"},
    )


def shows_no_secret(error: BaseException) -> None:
    """Neither the message nor the whole printed traceback (chain included) names a secret
    (the tests keep their URLs in variables, so their own source lines show none)."""
    printed = "".join(traceback.format_exception(error))
    for secret in SECRETS:
        assert secret not in printed, printed
        assert secret not in repr(error)
    assert error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__


@pytest.mark.parametrize("status", [200, 201, 202, 204])
def test_a_2xx_is_returned_with_the_key_and_content_type_sent(receiver: Any, status: int) -> None:
    response = post(url(receiver, str(status)))
    assert response.status_code == status
    [headers] = receiver.seen
    assert headers["idempotency-key"] == "e1-notify"
    assert headers["content-type"] == "application/json"
    assert headers["x-extra"] == "1"


@pytest.mark.parametrize("status", [500, 502, 503, 504, 408, 425, 429])
def test_5xx_408_425_429_are_retryable(receiver: Any, status: int) -> None:
    """Raised as `ReceiverUnavailable`: out of the handler, the lease is released."""
    with pytest.raises(ReceiverUnavailable, match=f"answered {status}; will retry") as raised:
        post(url(receiver, str(status)))
    assert f"http://{receiver.base}/{status}" in str(raised.value)
    shows_no_secret(raised.value)
    assert send.is_retryable(status)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 410, 413, 422])
def test_other_4xx_are_terminal(receiver: Any, status: int) -> None:
    """Raised as `TerminalError`: recorded failed, not retried."""
    with pytest.raises(TerminalError, match=f"with {status}; not retried") as raised:
        post(url(receiver, str(status)))
    shows_no_secret(raised.value)
    assert not send.is_retryable(status)


def test_a_timeout_is_retryable(receiver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(send, "READ_TIMEOUT_SECONDS", 0.2)
    with pytest.raises(ReceiverUnavailable, match="timed out") as raised:
        post(url(receiver, "slow"))
    shows_no_secret(raised.value)


def test_a_refused_and_a_cut_off_connection_are_retryable(receiver: Any) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    refusing = f"http://user:secret-pw@127.0.0.1:{port}/hook?token=secret-token"
    with pytest.raises(ReceiverUnavailable, match="could not connect") as raised:
        post(refusing)
    shows_no_secret(raised.value)
    with pytest.raises(ReceiverUnavailable) as raised:
        post(url(receiver, "cut"))
    shows_no_secret(raised.value)


def test_a_url_it_cannot_send_to_is_terminal() -> None:
    wrong_scheme = "htp://user:secret-pw@example.invalid/hook?token=secret-token"
    with pytest.raises(TerminalError, match="invalid URL") as raised:
        post(wrong_scheme)
    shows_no_secret(raised.value)


def test_a_session_is_used_and_debug_logs_show_no_secret(
    receiver: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With every logger at DEBUG (urllib3 names each request's path and query there), no
    line names a secret; the session's connection is the one used."""
    caplog.set_level(logging.DEBUG)
    with requests.Session() as session:
        post(url(receiver, "200"), session=session)
        with pytest.raises(ReceiverUnavailable):
            post(url(receiver, "503"), session=session)
    assert "POST /200" in caplog.text  # urllib3's DEBUG line is there, scrubbed
    for secret in SECRETS:
        assert secret not in caplog.text, caplog.text
    assert len(receiver.seen) == 2


def test_safe_url_drops_userinfo_query_and_fragment() -> None:
    assert send.safe_url("https://u:p@hooks.example.com/a/b?token=t#f") == (
        "https://hooks.example.com/a/b"
    )


def test_the_template_imports_the_librarys_sender() -> None:
    """functions.http_delivery is the library's module under the template's name."""
    from functions import http_delivery

    assert http_delivery.post_once is post_once
    assert http_delivery.ReceiverUnavailable is ReceiverUnavailable
