"""A test run refuses to start when its environment would not test what it claims to."""

from __future__ import annotations

import os
import subprocess
import sys

from tests import emulator_env

ROOT = emulator_env.ROOT
GOOD = {
    **emulator_env.configured_hosts(),
    "GCLOUD_PROJECT": emulator_env.PROJECT,
}


def test_the_environment_make_test_sets_has_no_problem() -> None:
    """What `firebase emulators:exec` exports is accepted as it is."""
    assert emulator_env.problems(GOOD) == []
    assert emulator_env.problems({**GOOD, "GOOGLE_CLOUD_PROJECT": emulator_env.PROJECT}) == []


def test_each_missing_or_wrong_variable_is_named() -> None:
    """Only FIRESTORE_EMULATOR_HOST exported: the other hosts and the project are named."""
    found = emulator_env.problems({"FIRESTORE_EMULATOR_HOST": GOOD["FIRESTORE_EMULATOR_HOST"]})
    assert [problem.split()[0] for problem in found] == [
        "PUBSUB_EMULATOR_HOST",
        "FIREBASE_EMULATOR_HUB",
        "GCLOUD_PROJECT",
    ]
    wrong = emulator_env.problems(
        {**GOOD, "FIRESTORE_EMULATOR_HOST": "127.0.0.1:9999", "GOOGLE_CLOUD_PROJECT": "my-project"}
    )
    assert len(wrong) == 2
    firestore = GOOD["FIRESTORE_EMULATOR_HOST"]
    assert f"firebase.json puts that emulator at {firestore}" in wrong[0]
    assert "GOOGLE_CLOUD_PROJECT is 'my-project'" in wrong[1]


def test_an_emulator_test_run_in_a_partial_environment_refuses_to_start() -> None:
    """pytest on an emulator test with only FIRESTORE_EMULATOR_HOST set exits 2 before any
    test runs, saying what is missing and which command runs the tests correctly."""
    env = {k: v for k, v in os.environ.items() if k not in GOOD and k != "GOOGLE_CLOUD_PROJECT"}
    env["FIRESTORE_EMULATOR_HOST"] = GOOD["FIRESTORE_EMULATOR_HOST"]
    env["GCLOUD_PROJECT"] = "my-project"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests/dedup/test_lease.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "PUBSUB_EMULATOR_HOST is not set" in output
    assert "GCLOUD_PROJECT is 'my-project'" in output
    assert "make test T=tests/dedup/test_lease.py" in output
    assert " passed" not in output
    assert " failed" not in output


OWN = {
    "FIRESTORE_EMULATOR_HOST": "127.0.0.1:23456",
    "GCLOUD_PROJECT": emulator_env.PROJECT,
    emulator_env.OWN_FIRESTORE: "1",
}
"""What `tools/test_runner.py` gives its run of the `firestore_only` tests."""


def test_the_run_on_a_firestore_of_its_own_points_at_nothing_else() -> None:
    """The own-Firestore environment is accepted at any Firestore address, and refused while it
    still points at a shared emulator: a test reaching past Firestore there must fail, not
    reach the emulators another run is using."""
    assert emulator_env.problems(OWN) == []
    shared = {**OWN, **GOOD, emulator_env.OWN_FIRESTORE: "1"}
    found = emulator_env.problems(shared)
    assert [problem.split()[0] for problem in found] == [
        "PUBSUB_EMULATOR_HOST",
        "FIREBASE_EMULATOR_HUB",
    ]
    no_host = {k: v for k, v in OWN.items() if k != "FIRESTORE_EMULATOR_HOST"}
    assert emulator_env.problems(no_host) == [
        f"FIRESTORE_EMULATOR_HOST is not set, but {emulator_env.OWN_FIRESTORE} is"
    ]


def test_a_test_that_reaches_past_firestore_is_refused_a_firestore_of_its_own() -> None:
    """pytest on a test of the Pub/Sub emulator in the own-Firestore environment exits 2 before
    any test runs, naming the test; a test of Firestore alone is accepted there."""
    env = {k: v for k, v in os.environ.items() if k not in GOOD and k != "GOOGLE_CLOUD_PROJECT"}
    env.update(OWN)
    env.pop("FIREBASE_AUTH_EMULATOR_HOST", None)
    shared = "tests/functions/test_relay_outbox.py::test_committed_message_is_published_once"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q"]
    result = subprocess.run(
        [*command, shared], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert f"{shared} reaches past Firestore" in output
    alone = "tests/dedup/test_lease.py"
    result = subprocess.run(
        [*command, alone], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
