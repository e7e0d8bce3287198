"""`make test`'s pytest: the suite as four pytest processes at once, inside the same
`firebase emulators:exec` run.

    venv/bin/python -m tools.test_runner [PYTEST ARGS]

With no argument (the whole suite, as `make test` and CI run it), four pytest processes run at
once, each on a share of the suite that the markers tests/conftest.py sets at collection
select:

* `SHARED`, the emulator tests that reach more than Firestore: triggers, the Functions,
  Pub/Sub and Auth emulators, the receiver on `.env.local`'s port, subprocesses; on the
  emulators `make test` started, reported as they run;
* `OWN`, the emulator tests that reach only Firestore, from their own process (the
  `firestore_only` marker): on a Firestore emulator of their own (`demo.own_firestore`, the
  same emulator build, started here), with no other emulator in their environment, so that one
  of them reaching past Firestore fails instead of passing;
* `HARNESS`, the deploy harness (`deploy_harness`): real gcloud and the Firebase CLI deploying
  the project against a local fake of Google's APIs; and the tests that start emulators of
  their own and reach none of the shared ones (`own_emulators`: a cold storm, the short soak,
  the demo with every port moved, the emulators' signal handling);
* `BESIDE`, the other tests that reach no emulator: those that run make, gcloud, pip or Python
  in subprocesses against copies of the project or fresh venvs, and the unit tests.

The reports of the last three are kept and printed after the first, in that order. The exit
status is the first failing one's (in that order), 0 when all pass. With arguments (`make test
T=... K=...`) one pytest runs exactly what was asked, on the emulators `make test` started.

Why: on this machine's two cores the emulator tests mostly wait (leases expiring, servers
starting, the emulators' answers), and the others mostly compute; four runs keep both cores
busy to the end. Two emulator tests never share a database at once: each emulator run has its
own emulator, and each of its tests starts from an empty database.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import IO

from demo.own_firestore import own_firestore
from tests.emulator_env import OWN_FIRESTORE, PROJECT, SHARED_EMULATOR_VARIABLES

SHARED = "needs_emulators and not firestore_only and not own_emulators"
"""The emulator tests run on the emulators `make test` started."""
OWN = "needs_emulators and firestore_only"
"""The emulator tests run on a Firestore emulator of their own."""
HARNESS = "(not needs_emulators and deploy_harness) or own_emulators"
"""The deploy harness, and the tests that start emulators of their own."""
BESIDE = "not needs_emulators and not deploy_harness"
"""The other tests that reach no emulator. `needs_emulators` and `firestore_only` are set at
collection by tests/conftest.py, before `-m` deselects, `deploy_harness` and `own_emulators` by
the modules themselves (an `own_emulators` test is also `needs_emulators`, never
`firestore_only`), so the four runs split the suite with nothing left out and nothing run
twice."""

KEPT = {
    OWN: "the tests of Firestore alone, on an emulator of their own",
    HARNESS: "the deploy harness and the tests of emulators of their own",
    BESIDE: "the other tests of no emulator",
}
"""The runs whose reports are kept and printed after the first's, in this order."""


def pytest(*args: str) -> list[str]:
    """The command line of a pytest run with `args`."""
    return [sys.executable, "-m", "pytest", *args]


def own_environment(firestore_host: str) -> dict[str, str]:
    """This process's environment, pointed at a Firestore emulator of its own and at nothing
    else (`tests.emulator_env` checks it)."""
    environment = {k: v for k, v in os.environ.items() if k not in SHARED_EMULATOR_VARIABLES}
    environment.update(
        {"FIRESTORE_EMULATOR_HOST": firestore_host, "GCLOUD_PROJECT": PROJECT, OWN_FIRESTORE: "1"}
    )
    return environment


def start(
    markers: str, report: IO[str], environment: Mapping[str, str] | None = None
) -> subprocess.Popen[str]:
    """A pytest run of the tests `markers` selects, started, its report written to `report`."""
    return subprocess.Popen(
        pytest("-m", markers, "-p", "no:cacheprovider"),
        stdout=report,
        stderr=subprocess.STDOUT,
        text=True,
        env=environment,
    )


def print_report(title: str, markers: str, report: IO[str]) -> None:
    """A kept report, under its title."""
    report.seek(0)
    print(f"\n===== {title} (-m '{markers}') =====")
    sys.stdout.write(report.read())
    sys.stdout.flush()


def run_split() -> int:
    """The whole suite as four pytest runs at once; the kept reports printed last."""
    children: dict[str, subprocess.Popen[str]] = {}
    with ExitStack() as stack:
        reports = {markers: stack.enter_context(tempfile.TemporaryFile("w+")) for markers in KEPT}
        try:
            children[HARNESS] = start(HARNESS, reports[HARNESS])
            children[BESIDE] = start(BESIDE, reports[BESIDE])
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="own-")))
            firestore = stack.enter_context(own_firestore(workdir))
            children[OWN] = start(OWN, reports[OWN], own_environment(firestore.host))
            statuses = [subprocess.call(pytest("-m", SHARED))]
            statuses += [children[markers].wait() for markers in KEPT]
        except BaseException:
            for child in children.values():
                child.kill()
                child.wait()
            raise
        for markers, title in KEPT.items():
            print_report(title, markers, reports[markers])
    return next((status for status in statuses if status), 0)


def main(argv: Sequence[str]) -> int:
    """Run pytest with `argv`, or the whole suite split in four when `argv` is empty."""
    if argv:
        return subprocess.call(pytest(*argv))
    return run_split()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
