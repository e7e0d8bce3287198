"""Is this process set up to test against the emulators `make test` starts? One answer, one place.

A test run against the emulators is only meaningful when every party talks to the same
emulators about the same project: the test's own clients, the functions it serves in-process
(which read `GCLOUD_PROJECT`) and the Functions emulator's functions (which use the ports of
`firebase.json`). With only `FIRESTORE_EMULATOR_HOST` exported, a served function writes to
another project than the one the test reads, and the test can pass for the wrong reason.
`problems()` lists every variable that is missing or disagrees; `tests/conftest.py` refuses to
start a run that selected an emulator test while there is any.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "demo-exactly-once"
"""The emulators' project id (`tools/emulators.py`, `.firebaserc`): a `demo-` id never reaches
a real project."""

HOST_VARIABLES = {
    "FIRESTORE_EMULATOR_HOST": "firestore",
    "PUBSUB_EMULATOR_HOST": "pubsub",
    "FIREBASE_EMULATOR_HUB": "hub",
}
"""Variable -> the emulator of `firebase.json` it must point at."""

OWN_FIRESTORE = "TESTS_OWN_FIRESTORE"
"""Set (to 1) by `tools/test_runner.py` on its run of the `firestore_only` tests: their
Firestore emulator is one of their own, at FIRESTORE_EMULATOR_HOST, and they reach no other."""

SHARED_EMULATOR_VARIABLES = (
    "PUBSUB_EMULATOR_HOST",
    "FIREBASE_EMULATOR_HUB",
    "FIREBASE_AUTH_EMULATOR_HOST",
)
"""The shared emulators a run on a Firestore emulator of its own must not point at."""

HOW_TO_RUN = (
    "Run the tests through the Makefile, which starts the emulators and sets all of these:\n"
    "  make test                                      # every test\n"
    "  make test T=tests/dedup/test_lease.py          # one file\n"
    "  make test T=tests/dedup/test_lease.py K=expired  # tests whose name matches\n"
    "  make unit                                      # only the tests that need no emulator"
)


def configured_hosts(firebase_json: Path = ROOT / "firebase.json") -> dict[str, str]:
    """Variable -> `host:port` that `firebase.json` gives its emulator."""
    emulators = json.loads(firebase_json.read_text())["emulators"]
    return {
        variable: f"{emulators[name]['host']}:{emulators[name]['port']}"
        for variable, name in HOST_VARIABLES.items()
    }


def problems(environ: Mapping[str, str], hosts: Mapping[str, str] | None = None) -> list[str]:
    """Every way `environ` differs from the environment `make test` gives pytest (empty: none).

    With `OWN_FIRESTORE` set, that is the environment of its run of the `firestore_only` tests:
    a Firestore emulator at any address, and none of `SHARED_EMULATOR_VARIABLES`.

    Each entry names the variable, what it is, and what it must be.
    """
    found: list[str] = []
    if environ.get(OWN_FIRESTORE):
        if not environ.get("FIRESTORE_EMULATOR_HOST"):
            found.append(f"FIRESTORE_EMULATOR_HOST is not set, but {OWN_FIRESTORE} is")
        found += [
            f"{variable} is set, but {OWN_FIRESTORE} runs tests that reach only Firestore"
            for variable in SHARED_EMULATOR_VARIABLES
            if environ.get(variable)
        ]
        expected: Mapping[str, str] = {}
    else:
        expected = configured_hosts() if hosts is None else hosts
    for variable, host in expected.items():
        value = environ.get(variable, "")
        if not value:
            found.append(f"{variable} is not set (the emulators listen on {host})")
        elif value.removeprefix("http://") != host:
            found.append(
                f"{variable} is {value!r}, but firebase.json puts that emulator at {host}, "
                "where the Functions emulator's functions look for it"
            )
    if environ.get("GCLOUD_PROJECT") != PROJECT:
        found.append(
            f"GCLOUD_PROJECT is {environ.get('GCLOUD_PROJECT', 'not set')!r}: it must be "
            f"{PROJECT!r}, the emulators' project, or functions served by the tests write to "
            "another project than the one the tests read"
        )
    other = environ.get("GOOGLE_CLOUD_PROJECT")
    if other and other != PROJECT:
        found.append(f"GOOGLE_CLOUD_PROJECT is {other!r}: unset it, or set it to {PROJECT!r}")
    return found


def refusal(found: list[str]) -> str:
    """The message a refused test run prints: what is wrong, then how to run the tests."""
    lines = "\n".join(f"  - {problem}" for problem in found)
    return (
        "These tests need the Firestore, Pub/Sub and Functions emulators, and this environment "
        f"does not point at them consistently:\n{lines}\n{HOW_TO_RUN}"
    )
