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
