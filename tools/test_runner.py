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

The reports of the last three are kept and printed after the first, in that order. When a run
fails, the last lines printed are the failing tests of all four runs together, each with the
run it was in (`failures`), so a failure far up in a long report is not missed. The exit
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

TITLES = {
    SHARED: "the tests of the shared emulators",
}
"""The title of the run whose report is printed as it runs."""
KEPT = {
    OWN: "the tests of Firestore alone, on an emulator of their own",
    HARNESS: "the deploy harness and the tests of emulators of their own",
    BESIDE: "the other tests of no emulator",
}
"""The runs whose reports are kept and printed after the first's, in this order."""


def failures(title: str, report: str) -> list[str]:
    """The lines of pytest's short summary (`-ra`) in `report` that name a failing test or a
    collection error, each prefixed with the run's `title`."""
    return [
        f"{title}: {line}" for line in report.splitlines() if line.startswith(("FAILED ", "ERROR "))
    ]


def print_failures(found: list[str]) -> None:
    """All runs' failing tests, together, last."""
    if found:
        print(f"\n===== {len(found)} failing in all four runs =====")
        print("\n".join(found))
        sys.stdout.flush()


def run_shared() -> tuple[int, str]:
    """The shared emulators' run, its report printed as it comes and also returned."""
    lines: list[str] = []
    with subprocess.Popen(
        pytest("-m", SHARED), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as child:
        assert child.stdout is not None
        for line in child.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line)
    return child.returncode, "".join(lines)


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


def print_report(title: str, markers: str, report: IO[str]) -> str:
    """A kept report, under its title; returned."""
    report.seek(0)
    text = report.read()
    print(f"\n===== {title} (-m '{markers}') =====")
    sys.stdout.write(text)
    sys.stdout.flush()
    return text


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
            status, shared_report = run_shared()
            statuses = [status] + [children[markers].wait() for markers in KEPT]
        except BaseException:
            for child in children.values():
                child.kill()
                child.wait()
            raise
        found = failures(TITLES[SHARED], shared_report)
        for markers, title in KEPT.items():
            found += failures(title, print_report(title, markers, reports[markers]))
    print_failures(found)
    return next((status for status in statuses if status), 0)


def main(argv: Sequence[str]) -> int:
    """Run pytest with `argv`, or the whole suite split in four when `argv` is empty."""
    if argv:
        return subprocess.call(pytest(*argv))
    return run_split()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
