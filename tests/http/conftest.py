"""Fixtures of the HTTP tests besides tests/plugin.py's (`user`, `http_function`...): the LINE
channel secret, the LINE function served, what it published, and the functions source with
crash points."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from google.cloud.pubsub_v1 import SubscriberClient
from google.pubsub_v1 import PubsubMessage

from demo.pubsub import ensure_topic, pull_all
from tests.conftest import PROJECT
from tests.http.support import LINE_SECRET

ROOT = Path(__file__).resolve().parents[2]
MAIN = str(ROOT / "main.py")
SERVED = str(Path(__file__).resolve().parent / "served.py")
"""The HTTP functions with crash points (and the test endpoints), as a functions source."""


@pytest.fixture(autouse=True)
def line_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """The channel secret the served LINE endpoint verifies with."""
    monkeypatch.setenv("LINE_CHANNEL_SECRET", LINE_SECRET)


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
