"""Test session set-up: which tests need the emulators, and a clean slate for each of those.

Two kinds of test live side by side in every package:

* **Emulator tests** use the `firestore_host` fixture, directly or through a fixture built on
  it (`firestore_client`, `make_dedup`, `read_record`, `invoke`, `serve`, ...), or are marked
  `needs_emulators` (or `e2e`) because they reach the emulators another way (a subprocess, the
  demo), or `own_emulators` because they start emulators of their own and reach none of the
  shared ones (a cold storm, the soak, the demo with every port moved). The collection hook
  below marks all of them `needs_emulators`; each but an `own_emulators` one starts with an
  empty database and the Functions emulator's triggers off (unless `e2e`), and each with no
  DEDUP_* variables. A run that selected any of them refuses to start unless the environment
  points at the emulators `make test` starts (`tests/emulator_env.py` says what is missing).
  Those that reach only Firestore are also marked `firestore_only` (see `firestore_only`
  below): `make test` runs them on a Firestore emulator of their own, beside the others.
* **Unit tests** are every other test: `make unit` runs them (`pytest -m "not needs_emulators"`)
  with no Java, no Node and no emulator, in seconds. A test that runs a subprocess (make,
  gcloud, the Firebase CLI, Python: seconds each) is marked `subprocesses` here, and `make
  unit` leaves it to `make test`: its function, or a function of the test modules it calls
  (followed through the names its code uses), uses `subprocess`, or it uses `project_copy`.

`make test` runs both inside one `firebase emulators:exec` run, which exports
FIRESTORE_EMULATOR_HOST, PUBSUB_EMULATOR_HOST, FIREBASE_EMULATOR_HUB and GCLOUD_PROJECT.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import types
from collections.abc import Iterator

import functions_framework
import pytest
import requests
from google.cloud import firestore

from dedup import testing
from tests import emulator_env
from tests.plugin import receiver_port

pytest_plugins = ("tests.plugin",)
"""The fixtures of HTTP, callable and task function tests (`user`, `http_function`,
`receiver`...), for every test under tests/: see tests/plugin.py."""

PROJECT = emulator_env.PROJECT


RECEIVER_PORT = receiver_port()
"""Where `.env.local` points the emulator's functions; the in-process ones are told the same."""
RECEIVER_URL = f"http://127.0.0.1:{RECEIVER_PORT}"
FUNCTION_ENV = {
    "WEBHOOK_ROUTES": (
        f'{{"default": "{RECEIVER_URL}/webhooks/default", "line": "{RECEIVER_URL}/webhooks/line"}}'
    ),
    "NOTIFY_URL": f"{RECEIVER_URL}/notify",
    "PAYMENTS_URL": f"{RECEIVER_URL}/payments",
    "RECEIPTS_URL": f"{RECEIVER_URL}/receipts",
}
"""The functions' variables, as `.env.local` gives them to the Functions emulator's functions."""

NEEDS_EMULATORS = "needs_emulators"
SUBPROCESSES = "subprocesses"
FIRESTORE_ONLY = "firestore_only"
OWN_EMULATORS = "own_emulators"
SHARED_EMULATORS = "shared_emulators"
BEYOND_FIRESTORE = frozenset({"auth_host", "http_function", "session_receiver"})
"""Fixtures that reach past Firestore: the Auth emulator, the HTTP functions served in-process
(which check a request's ID token against it), and the receiver on the port that `.env.local`
gives the Functions emulator's functions (one per machine)."""


def pytest_configure(config: pytest.Config) -> None:
    """Give the functions served in this process the variables `.env.local` gives the emulator's.

    Set here, before collection, because some test modules import main.py (whose functions
    check their variables when an instance starts).
    """
    os.environ.update(FUNCTION_ENV)


def needs_emulators(item: pytest.Item) -> bool:
    """True for a test that talks to the emulators (see the module docstring)."""
    return (
        "firestore_host" in getattr(item, "fixturenames", ())
        or item.get_closest_marker(NEEDS_EMULATORS) is not None
        or item.get_closest_marker(OWN_EMULATORS) is not None
        or item.get_closest_marker("e2e") is not None
    )


def firestore_only(item: pytest.Item) -> bool:
    """True for an emulator test that reaches Firestore and nothing else, from this process:
    through the `firestore_host` fixture (a test marked `needs_emulators` by hand reaches them
    another way), with no trigger (`e2e`), no wheel (`packaging`), no subprocess, no fixture of
    `BEYOND_FIRESTORE`, and not marked `shared_emulators` by hand (Pub/Sub, the security rules
    `make test` loads). `make test` runs these on a Firestore emulator of their own, beside the
    others (`tools/test_runner.py`); a test that reaches past Firestore there fails, since
    nothing else is in its environment. Asked by the collection hook after it has marked the
    tests that run subprocesses (`subprocesses`)."""
    return (
        "firestore_host" in getattr(item, "fixturenames", ())
        and item.get_closest_marker(OWN_EMULATORS) is None
        and item.get_closest_marker("e2e") is None
        and item.get_closest_marker("packaging") is None
        and item.get_closest_marker(SHARED_EMULATORS) is None
        and not BEYOND_FIRESTORE.intersection(getattr(item, "fixturenames", ()))
        and item.get_closest_marker(SUBPROCESSES) is None
    )


def spawns(function: object, seen: set[int] | None = None) -> bool:
    """`function` runs a subprocess: it names `subprocess`, or calls a function of a test
    module that does (followed through the names its code uses)."""
    seen = seen if seen is not None else set()
    code = getattr(function, "__code__", None)
    if code is None or id(code) in seen:
        return False
    seen.add(id(code))
    found = getattr(function, "__globals__", {})
    codes = [code, *(c for c in code.co_consts if isinstance(c, types.CodeType))]
    for name in (name for c in codes for name in c.co_names):
        value = found.get(name)
        if value is subprocess:
            return True
        value = inspect.unwrap(value) if inspect.isroutine(value) else value
        module = getattr(value, "__module__", "") or ""
        if inspect.isfunction(value) and module.startswith("tests.") and spawns(value, seen):
            return True
    return False


def runs_subprocesses(item: pytest.Item) -> bool:
    """True for a test that runs a subprocess (see the module docstring)."""
    return (
        "project_copy" in getattr(item, "fixturenames", ())
        or item.get_closest_marker(SUBPROCESSES) is not None
        or spawns(getattr(item, "function", None))
    )


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the markers added here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the emulator tests and the ones that run subprocesses; put the end-to-end ones
    first (see `emulator_triggers`)."""
    for item in items:
        if needs_emulators(item):
            item.add_marker(NEEDS_EMULATORS)
        if runs_subprocesses(item):
            item.add_marker(SUBPROCESSES)
        if firestore_only(item):
            item.add_marker(FIRESTORE_ONLY)
    items.sort(key=lambda item: item.get_closest_marker("e2e") is None)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Refuse a run that selected emulator tests in an environment that does not fit them."""
    if any(item.get_closest_marker(NEEDS_EMULATORS) for item in session.items):
        found = emulator_env.problems(os.environ)
        if os.environ.get(emulator_env.OWN_FIRESTORE):
            found += [
                f"{item.nodeid} reaches past Firestore: run it with the shared emulators"
                for item in session.items
                if item.get_closest_marker(NEEDS_EMULATORS)
                and not item.get_closest_marker(FIRESTORE_ONLY)
            ]
        if found:
            pytest.exit(emulator_env.refusal(found), returncode=2)


@pytest.fixture(autouse=True)
def fresh_errorhandler() -> Iterator[None]:
    """After each test, functions-framework's `errorhandler` is its stand-in again.

    `create_app` binds it to the app it creates; once that app has served a request, a later
    in-process import of main.py (`install_boundary(functions_framework.errorhandler)`, as the
    deploy tools do) would try to set up a running app, which Flask refuses.
    """
    yield
    functions_framework.errorhandler = functions_framework.DummyErrorHandler()


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with the dedup defaults: no DEDUP_* variable leaks in from the shell;
    and with no FUNCTION_TARGET, which functions-framework sets for the whole process when a
    test serves a function in-process (restored at the test's end, so it leaks into no later
    test's subprocesses, whose main.py would run that function's start-up checks)."""
    for name in list(os.environ):
        if name.startswith("DEDUP_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("FUNCTION_TARGET", raising=False)


@pytest.fixture(autouse=True)
def emulator_isolation(request: pytest.FixtureRequest) -> None:
    """An emulator test starts with an empty database and the emulator's triggers as it needs
    them; a unit test, or one that starts emulators of its own (`own_emulators`), gets nothing
    (it reaches none of the shared emulators, which another run may be using)."""
    node = request.node
    if node.get_closest_marker(NEEDS_EMULATORS) and not node.get_closest_marker(OWN_EMULATORS):
        request.getfixturevalue("clean_firestore")
        request.getfixturevalue("emulator_triggers")


@pytest.fixture(scope="session")
def firestore_host() -> str:
    """host:port of the Firestore emulator (the session refused to start without it)."""
    return os.environ["FIRESTORE_EMULATOR_HOST"]


@pytest.fixture(scope="session")
def firestore_client(firestore_host: str) -> firestore.Client:
    """One Firestore client for the session, talking to the emulator (never a real project)."""
    return firestore.Client(project=PROJECT)


@pytest.fixture
def clean_firestore(firestore_host: str) -> None:
    """An empty database (the emulator's documented reset endpoint), for each emulator test.

    This wipes the emulator's data: run tests against emulators of their own (`make test`
    starts them), not ones holding data you entered by hand.
    """
    testing.FirestoreEmulator(firestore_host, PROJECT).clear(timeout=10)


_triggers_on = True


@pytest.fixture
def emulator_triggers(request: pytest.FixtureRequest) -> None:
    """The Functions emulator's background triggers: on for `e2e` tests, off for the others.

    Most tests play the platform themselves, delivering the events they build, so the
    emulator's own deliveries of the same writes would be extra effects. The end-to-end tests
    run first, with the triggers as the emulator starts them; every other emulator test
    switches them off again (5 ms), because the emulator re-registers them whenever it reloads
    the source after an edit. They are never switched back on: re-enabling registers each
    trigger twice, and the emulator then delivers every write twice, under two event ids. That
    is a limitation of the Functions emulator (firebase-tools), hence the order.
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
