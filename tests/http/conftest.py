"""Fixtures of the HTTP tests: the Auth emulator's users, and HTTP functions served in this
process (functions-framework's test client, signature type http) over the emulators."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import functions_framework
import pytest
from flask.testing import FlaskClient
from google.cloud.pubsub_v1 import SubscriberClient
from google.pubsub_v1 import PubsubMessage

from demo.pubsub import ensure_topic, pull_all
from tests.conftest import PROJECT
from tests.http.support import AUTH_ENV, LINE_SECRET, User, sign_up

ROOT = Path(__file__).resolve().parents[2]
MAIN = str(ROOT / "main.py")
SERVED = str(Path(__file__).resolve().parent / "served.py")
"""The HTTP functions with crash points (and the test endpoints), as a functions source."""


@pytest.fixture(scope="session")
def auth_host(firestore_host: str) -> str:
    """host:port of the Auth emulator (`make test` starts it; firebase.json names its port)."""
    host = os.environ.get(AUTH_ENV)
    if not host:
        pytest.exit(
            f"{AUTH_ENV} is not set: the HTTP tests need the Auth emulator; run them with "
            "`make test T=tests/http` (tools/emulators.py starts it)",
            returncode=2,
        )
    return host


@pytest.fixture
def user(auth_host: str) -> User:
    """A fresh signed-in user."""
    return sign_up(auth_host)


@pytest.fixture
def other_user(auth_host: str) -> User:
    """A second user."""
    return sign_up(auth_host)


@pytest.fixture(autouse=True)
def line_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """The channel secret the served LINE endpoint verifies with."""
    monkeypatch.setenv("LINE_CHANNEL_SECRET", LINE_SECRET)


@pytest.fixture
def http_function(firestore_host: str) -> Callable[..., FlaskClient]:
    """http_function(name, source=main.py) -> a test client of that HTTP function."""

    def make(name: str, source: str = MAIN) -> FlaskClient:
        app = functions_framework.create_app(target=name, source=source, signature_type="http")
        return app.test_client()

    return make


@pytest.fixture
def line(http_function: Callable[..., FlaskClient]) -> FlaskClient:
    """`receive_line_webhook`, served (the LINE tests)."""
    return http_function("receive_line_webhook")


@pytest.fixture
def published(firestore_host: str) -> Iterator[Callable[[], list[PubsubMessage]]]:
    """published() -> the messages published to `webhooks` since the test began."""
    name = f"line-{uuid.uuid4().hex[:8]}"
    ensure_topic(PROJECT, "webhooks", subscription=name)
    path = SubscriberClient().subscription_path(PROJECT, name)
    yield lambda: pull_all(path)
    SubscriberClient().delete_subscription(subscription=path)
