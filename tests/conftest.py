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

from demo.receiver import Receiver, running_receiver

PROJECT = os.environ.get("GCLOUD_PROJECT", "demo-exactly-once")
RECEIVER_PORT = 8765
"""Where `.env.local` points the emulator's functions; the in-process ones are told the same."""
RECEIVER_URL = f"http://127.0.0.1:{RECEIVER_PORT}"
FUNCTION_ENV = {
    "WEBHOOK_ROUTES": (
        f'{{"default": "{RECEIVER_URL}/webhooks/default", "line": "{RECEIVER_URL}/webhooks/line"}}'
    ),
    "NOTIFY_URL": f"{RECEIVER_URL}/notify",
}
os.environ.update(FUNCTION_ENV)  # before any test imports main.py


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
    url = f"http://{firestore_host}/emulator/v1/projects/{PROJECT}/databases/(default)/documents"
    requests.delete(url, timeout=10).raise_for_status()
    return


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """End-to-end tests run first, while the Functions emulator's triggers are still on."""
    items.sort(key=lambda item: item.get_closest_marker("e2e") is None)


_triggers_on = True


@pytest.fixture(autouse=True)
def emulator_triggers(request: pytest.FixtureRequest) -> None:
    """The Functions emulator's background triggers: on for `e2e` tests, off for the others.

    Most tests play the platform themselves, delivering the events they build, so the
    emulator's own deliveries of the same writes would be extra effects. The end-to-end tests
    run first, with the triggers as the emulator starts them; every other test switches them
    off again (5 ms), because the emulator re-registers them whenever it reloads the source
    after an edit. They are never switched back on: re-enabling registers each trigger twice,
    and the emulator then delivers every write twice, under two event ids.
    """
    global _triggers_on
    if request.node.get_closest_marker("e2e") is not None:
        assert _triggers_on, "end-to-end tests must run before the others (see the collection hook)"
        return
    _triggers_on = False
    hub = os.environ.get("FIREBASE_EMULATOR_HUB")
    if hub:  # no hub: a bare Firestore emulator, no triggers to switch
        response = requests.put(f"http://{hub}/functions/disableBackgroundTriggers", timeout=120)
        if response.status_code != 400:  # 400: the Functions emulator is not running
            response.raise_for_status()


@pytest.fixture(scope="session")
def session_receiver() -> Iterator[Receiver]:
    """The HTTP receiver the functions deliver to, on the port `.env.local` names."""
    try:
        with running_receiver(RECEIVER_PORT) as receiver:
            yield receiver
    except OSError as exc:
        pytest.exit(f"port {RECEIVER_PORT} for the test receiver is taken: {exc}", returncode=2)


@pytest.fixture
def receiver(session_receiver: Receiver) -> Receiver:
    """The receiver, emptied of earlier tests' requests and faults."""
    session_receiver.reset()
    return session_receiver
