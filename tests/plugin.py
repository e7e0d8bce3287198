"""Test helpers for your own HTTP, callable and task functions: a pytest plugin.

`tests/conftest.py` loads it for every test under `tests/`, so its fixtures need no import;
the helpers below are imported from here (`from tests.plugin import User, new_key, ...`).
docs/testing.md shows a test of each kind. On the emulators `make test` starts:

Fixtures
    `auth_host`: host:port of the Auth emulator. `user`, `other_user`: a fresh signed-in
    user of it (`User`: `uid`, `id_token`, and `bearer`, the Authorization header).
    `http_function(name)`: a test client of an HTTP or callable function of main.py, served in
    this process as functions-framework serves it (`source=` another file).
    `task_function(name)`: a task-queue function, served the same way (`TaskFunction`: its
    `dispatch(task_dispatch(...))` as Cloud Tasks dispatches, `dispatch_concurrently`...).
    `receiver`: the recording HTTP receiver on the port `.env.local` names (what the
    functions send to: `receiver.applied(path)`, `receiver.fail(path, status)`...).

Helpers (the event builders and concurrent deliveries are the library's, `dedup.testing`)
    `sign_up()`, `new_key()`, `request_headers(user, key)` (JSON, token, Idempotency-Key),
    `call(client, user, data)` (the callable protocol: `(status, body)`),
    `task_dispatch(task_name, data, queue=...)` (the request Cloud Tasks sends),
    `function_url(name)` (where the Functions emulator serves a function, from firebase.json).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import functions_framework
import pytest
from flask.testing import FlaskClient

from dedup import testing
from dedup.cli import dotenv
from dedup.testing import HttpEvent
from demo.clients import AUTH_ENV, User, function_url, new_key, sign_up
from demo.clients import order_headers as request_headers
from demo.receiver import Receiver, running_receiver
from demo.tasks import task_dispatch

__all__ = [
    "MAIN",
    "TaskFunction",
    "User",
    "call",
    "function_url",
    "new_key",
    "receiver_port",
    "request_headers",
    "sign_up",
    "task_dispatch",
]

ROOT = Path(__file__).resolve().parent.parent
MAIN = str(ROOT / "main.py")
ENV_LOCAL = ROOT / ".env.local"


@dataclass
class TaskFunction:
    """A task-queue function behind functions-framework's Flask test client; the deliveries
    are `dedup.testing`'s, aimed at the client (`testing.via_test_client`)."""

    client: FlaskClient

    def dispatch(self, task: HttpEvent) -> int:
        """POST the task once, as Cloud Tasks does; the HTTP status it would see."""
        return testing.deliver(testing.via_test_client(self.client), task)

    def dispatch_concurrently(self, task: HttpEvent, copies: int) -> list[int]:
        """`copies` dispatches of the same task at once, from as many threads."""
        return testing.deliver_concurrently(self.dispatch, task, copies)

    def dispatch_until_done(self, task: HttpEvent, limit: int = 200) -> list[int]:
        """Dispatch until one answer is 2xx, as Cloud Tasks retries; every status seen."""
        return testing.deliver_until_done(self.dispatch, task, limit=limit)


def receiver_port(env_local: Path = ENV_LOCAL) -> int:
    """The port `.env.local`'s NOTIFY_URL points the emulator's functions at (7765 as shipped).

    The test receiver listens there, so moving it is one edit of `.env.local`.
    """
    url = dotenv.parse(env_local.read_text())[0].get("NOTIFY_URL", "")
    return urlsplit(url).port or 7765


def call(client: FlaskClient, user: User | None, data: Any) -> tuple[int, Any]:
    """Call a served callable function as the Firebase client SDKs do (`POST {"data": ...}`
    with the user's ID token); its HTTP status and JSON body (`{"result"}` or `{"error"}`)."""
    headers = {"Content-Type": "application/json", **(user.bearer if user else {})}
    response = client.post("/", json={"data": data}, headers=headers)
    return response.status_code, response.get_json()


@pytest.fixture(scope="session")
def auth_host(firestore_host: str) -> str:
    """host:port of the Auth emulator (`make test` starts it; firebase.json names its port)."""
    host = os.environ.get(AUTH_ENV)
    if not host:
        pytest.exit(
            f"{AUTH_ENV} is not set: tests of HTTP functions need the Auth emulator; run them "
            "with `make test T=...` (tools/emulators.py starts it)",
            returncode=2,
        )
    return host


@pytest.fixture
def user(auth_host: str) -> User:
    """A fresh signed-in user of the Auth emulator."""
    return sign_up(auth_host)


@pytest.fixture
def other_user(auth_host: str) -> User:
    """A second user."""
    return sign_up(auth_host)


_LOADED: dict[tuple[str, str, str], FlaskClient] = {}
"""Functions of sources other than main.py, loaded once per session: a file's decorators
register its suffixes when it is imported, which an instance does once (main.py's functions
live in modules Python imports once anyway)."""


def _served(signature_type: str) -> Callable[..., FlaskClient]:
    def make(name: str, source: str = MAIN) -> FlaskClient:
        key = (name, str(source), signature_type)
        if key in _LOADED:
            return _LOADED[key]
        app = functions_framework.create_app(
            target=name, source=str(source), signature_type=signature_type
        )
        client = app.test_client()
        if str(source) != MAIN:
            _LOADED[key] = client
        return client

    return make


@pytest.fixture
def http_function(firestore_host: str) -> Callable[..., FlaskClient]:
    """http_function(name, source=main.py) -> a test client of that HTTP (or callable)
    function, served in this process on the emulators."""
    return _served("http")


@pytest.fixture
def task_function(firestore_host: str) -> Callable[..., TaskFunction]:
    """task_function(name, source=main.py) -> that task-queue function, served in this process
    on the emulators: `.dispatch(task_dispatch(task_name, data, queue=name))` as Cloud Tasks
    does (also `dispatch_concurrently`, `dispatch_until_done`)."""
    serve = _served("http")
    return lambda name, source=MAIN: TaskFunction(serve(name, source))


@pytest.fixture(scope="session")
def session_receiver() -> Iterator[Receiver]:
    """The HTTP receiver the functions deliver to, on the port `.env.local` names."""
    port = receiver_port()
    try:
        with running_receiver(port) as receiver:
            yield receiver
    except OSError as exc:
        pytest.exit(f"port {port} for the test receiver is taken: {exc}", returncode=2)


@pytest.fixture
def receiver(session_receiver: Receiver) -> Receiver:
    """The receiver, emptied of earlier tests' requests and faults."""
    session_receiver.reset()
    return session_receiver
