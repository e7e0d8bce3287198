"""Task-queue functions served in this process (functions-framework's test client, signature
`http`, as Cloud Run serves them), and what the tests read back from the emulators."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import functions_framework
import pytest
from flask.testing import FlaskClient
from google.cloud import firestore

from demo.events import HttpEvent
from functions.index_post import FUNCTION_ID, search_index_url
from tests.conftest import RECEIVER_URL
from tests.functions.conftest import MAIN

SEARCH_PATH = "/search"
SEARCH_INDEX_URL = f"{RECEIVER_URL}{SEARCH_PATH}"
"""Where `.env.local` points the emulator's `indexPost`; the in-process one is told the same."""


@pytest.fixture(autouse=True)
def search_index_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """SEARCH_INDEX_URL as `.env.local` gives it, read afresh by each test."""
    monkeypatch.setenv("SEARCH_INDEX_URL", SEARCH_INDEX_URL)
    search_index_url.cache_clear()
    yield
    search_index_url.cache_clear()


@dataclass
class TaskFunction:
    """A task-queue function of main.py behind functions-framework's Flask test client."""

    client: FlaskClient

    def dispatch(self, task: HttpEvent) -> int:
        """POST the task once, as Cloud Tasks does; the HTTP status it would see."""
        return self.client.post("/", data=task.body, headers=dict(task.headers)).status_code

    def dispatch_concurrently(self, task: HttpEvent, copies: int) -> list[int]:
        """`copies` dispatches of the same task at once, from as many threads."""
        with ThreadPoolExecutor(max_workers=copies) as pool:
            return list(pool.map(lambda _: self.dispatch(task), range(copies)))

    def dispatch_until_done(self, task: HttpEvent, limit: int = 200) -> list[int]:
        """Dispatch until one answer is 2xx, as Cloud Tasks retries; every status seen."""
        statuses = [self.dispatch(task)]
        while not 200 <= statuses[-1] < 300 and len(statuses) < limit:
            statuses.append(self.dispatch(task))
        return statuses


@pytest.fixture
def index_post(firestore_host: str) -> TaskFunction:
    """`indexPost` of main.py, served in this process on the emulators."""
    app = functions_framework.create_app(target=FUNCTION_ID, source=MAIN, signature_type="http")
    return TaskFunction(app.test_client())


@pytest.fixture
def records(firestore_client: firestore.Client) -> Callable[[], list[dict[str, Any]]]:
    """Every dedup record of index_post, as stored (the Functions emulator may still be
    finishing other functions' deliveries of an earlier end-to-end test's writes)."""

    def read() -> list[dict[str, Any]]:
        return [
            d.to_dict() or {}
            for d in firestore_client.collection("triggerEvents").stream()
            if d.id.endswith("-index_post")
        ]

    return read


def tasks_emulator_host() -> str:
    """host:port of the Cloud Tasks emulator, as `firebase emulators:exec` exports it."""
    host = os.environ.get("CLOUD_TASKS_EMULATOR_HOST")
    if not host:
        pytest.fail("CLOUD_TASKS_EMULATOR_HOST is not set: run the tests with `make test`")
    return host
