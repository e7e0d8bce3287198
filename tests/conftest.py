"""Session-wide test environment: the emulators started by `make test`, a clean database per test.

`make test` runs pytest inside one `firebase emulators:exec` run, which exports
FIRESTORE_EMULATOR_HOST, PUBSUB_EMULATOR_HOST and FIREBASE_EMULATOR_HUB. Every test gets an
empty Firestore database and an environment with no DEDUP_* overrides.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import requests
from google.cloud import firestore

PROJECT = os.environ.get("GCLOUD_PROJECT", "demo-exactly-once")


def _emulator_host(variable: str) -> str:
    host = os.environ.get(variable)
    if not host:
        pytest.exit(
            f"{variable} is not set: run the tests with `make test`, which starts the emulators "
            "(or start them yourself with `make emulators` and export the variable).",
            returncode=2,
        )
    return host


@pytest.fixture(scope="session")
def firestore_host() -> str:
    """host:port of the Firestore emulator."""
    return _emulator_host("FIRESTORE_EMULATOR_HOST")


@pytest.fixture(scope="session")
def firestore_client(firestore_host: str) -> firestore.Client:
    """One Firestore client for the session, talking to the emulator (never a real project)."""
    return firestore.Client(project=PROJECT)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with the dedup defaults: no DEDUP_* variable leaks in from the shell."""
    for name in list(os.environ):
        if name.startswith("DEDUP_"):
            monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def clean_firestore(firestore_host: str) -> Iterator[None]:
    """Each test starts with an empty database (the emulator's documented reset endpoint)."""
    url = (
        f"http://{firestore_host}/emulator/v1/projects/{PROJECT}"
        "/databases/(default)/documents"
    )
    requests.delete(url, timeout=10).raise_for_status()
    yield
