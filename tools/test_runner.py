"""`make test`'s pytest: the suite as three pytest processes at once, inside the same
`firebase emulators:exec` run.

    venv/bin/python -m tools.test_runner [PYTEST ARGS]

With no argument (the whole suite, as `make test` and CI run it), three pytest processes run at
once:

* the emulator tests that reach more than Firestore (`SHARED`): triggers, the Functions,
  Pub/Sub and Auth emulators, the receiver on `.env.local`'s port, subprocesses; reported as
  they run, on the emulators `make test` started;
* the emulator tests that reach only Firestore, from their own process (`OWN`, the
  `firestore_only` marker that tests/conftest.py sets): on a Firestore emulator of their own
  (`demo.own_firestore`, the same emulator build, started here), with no other emulator in
  their environment, so that one of them reaching past Firestore fails instead of passing;
* the tests that reach no emulator (`BESIDE`): the deploy harness (real gcloud and the Firebase
  CLI against a local fake of Google's APIs), the tests that run make, gcloud, pip or Python in
  subprocesses against copies of the project or fresh venvs, and the unit tests.

The reports of the last two are kept and printed after the first. The exit status is the first
failing one's (in that order), 0 when all pass. With arguments (`make test T=... K=...`) one
pytest runs exactly what was asked, on the emulators `make test` started.

Why: the emulator tests spend much of their time waiting (leases expiring, servers starting,
the emulators' answers), not computing, and every emulator test starts from an empty database,
so two of them never share a database at once. Each run has its own: the shared emulators' for
the first, the own emulator's for the second.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from demo.own_firestore import own_firestore
from tests.emulator_env import BEYOND_FIRESTORE, OWN_FIRESTORE, PROJECT

BESIDE = "not needs_emulators"
"""The tests that reach no emulator. `needs_emulators` and `firestore_only` are set at
collection by tests/conftest.py, before `-m` deselects, so the three runs split the suite with
nothing left out and nothing run twice."""
OWN = "needs_emulators and firestore_only"
"""The emulator tests run on a Firestore emulator of their own."""
SHARED = "needs_emulators and not firestore_only"
"""The emulator tests run on the emulators `make test` started."""


def pytest(*args: str) -> list[str]:
    """The command line of a pytest run with `args`."""
    return [sys.executable, "-m", "pytest", *args]


def own_environment(firestore_host: str) -> dict[str, str]:
    """This process's environment, pointed at a Firestore emulator of its own and at nothing
    else (`tests.emulator_env` checks it)."""
    environment = {k: v for k, v in os.environ.items() if k not in BEYOND_FIRESTORE}
    environment.update(
        {"FIRESTORE_EMULATOR_HOST": firestore_host, "GCLOUD_PROJECT": PROJECT, OWN_FIRESTORE: "1"}
    )
    return environment


def start(
    markers: str, report: IO[str], environment: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """A pytest run of the tests `markers` selects, started, its report written to `report`."""
    return subprocess.Popen(
        pytest("-m", markers, "-p", "no:cacheprovider"),
        stdout=report,
        stderr=subprocess.STDOUT,
        text=True,
        env=environment,
    )


def print_report(title: str, report: IO[str]) -> None:
    """A kept report, under its title."""
    report.seek(0)
    print(f"\n===== {title} =====")
    sys.stdout.write(report.read())
    sys.stdout.flush()


def run_split() -> int:
    """The whole suite as three pytest runs at once; the kept reports printed last."""
    with (
        tempfile.TemporaryDirectory(prefix="own-firestore-") as workdir,
        tempfile.TemporaryFile("w+") as beside_report,
        tempfile.TemporaryFile("w+") as own_report,
    ):
        children: list[subprocess.Popen[str]] = []
        try:
            children.append(start(BESIDE, beside_report))
            with own_firestore(Path(workdir)) as firestore:
                children.append(start(OWN, own_report, own_environment(firestore.host)))
                shared = subprocess.call(pytest("-m", SHARED))
                own = children[1].wait()
            beside = children[0].wait()
        except BaseException:
            for child in children:
                child.kill()
                child.wait()
            raise
        print_report(f"the tests of Firestore alone, on one of their own (-m '{OWN}')", own_report)
        print_report(f"the tests of no emulator (-m '{BESIDE}')", beside_report)
    return shared or own or beside


def main(argv: Sequence[str]) -> int:
    """Run pytest with `argv`, or the whole suite split in three when `argv` is empty."""
    if argv:
        return subprocess.call(pytest(*argv))
    return run_split()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
