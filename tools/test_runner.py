"""`make test`'s pytest: the tests that need no emulator beside those that do, on the
machine's second core.

    venv/bin/python -m tools.test_runner [PYTEST ARGS]

With no argument (the whole suite, as `make test` and CI run it), two pytest processes run at
once, inside the same `firebase emulators:exec` run:

* the tests that reach no emulator (`not needs_emulators`): the deploy harness (real gcloud and
  the Firebase CLI against a local fake of Google's APIs), the tests that run make, gcloud,
  pip or Python in subprocesses against copies of the project or fresh venvs, and the unit
  tests; its report kept and printed after the other;
* the emulator tests, reported as they run.

The exit status is the first failing one's (the emulator run's first), 0 when both pass. With
arguments (`make test T=... K=...`) one pytest runs exactly what was asked.

Why: the suite is one pytest process, about one core of two, and its emulator tests spend
much of their time waiting (leases expiring, servers starting, the emulators' answers). A test
that reaches no emulator shares nothing with them: no database, no trigger, no port of
`firebase.json`, no file the Functions emulator watches. An emulator test is never put beside
another one: they share the emulators and each starts from an empty database.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Sequence

BESIDE = "not needs_emulators"
"""The tests that run beside the emulator tests: `needs_emulators` is set at collection by
tests/conftest.py, before `-m` deselects, on every test that reaches an emulator (its fixtures,
or the marker by hand), so the two runs split the suite with nothing left out."""


def pytest(*args: str) -> list[str]:
    """The command line of a pytest run with `args`."""
    return [sys.executable, "-m", "pytest", *args]


def run_split() -> int:
    """The whole suite as two pytest runs at once; the no-emulator run's report printed last."""
    with tempfile.TemporaryFile("w+") as report:
        beside = subprocess.Popen(
            pytest("-m", BESIDE, "-p", "no:cacheprovider"),
            stdout=report,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            main = subprocess.call(pytest("-m", f"not ({BESIDE})"))
            done = beside.wait()
        except BaseException:
            beside.kill()
            beside.wait()
            raise
        report.seek(0)
        print(f"\n===== the tests of no emulator, run beside those above (-m '{BESIDE}') =====")
        sys.stdout.write(report.read())
        sys.stdout.flush()
    return main or done


def main(argv: Sequence[str]) -> int:
    """Run pytest with `argv`, or the whole suite split in two when `argv` is empty."""
    if argv:
        return subprocess.call(pytest(*argv))
    return run_split()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
