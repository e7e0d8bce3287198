"""`indexPost` served in this process (tests/plugin.py's `task_function`), and what the tests
read back from the emulators."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.cloud import firestore

from functions.index_post import FUNCTION_ID, search_index_url
from tests.conftest import RECEIVER_URL
from tests.plugin import TaskFunction

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


@pytest.fixture
def index_post(task_function: Callable[..., TaskFunction]) -> TaskFunction:
    """`indexPost` of main.py, served in this process on the emulators."""
    return task_function(FUNCTION_ID)


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
