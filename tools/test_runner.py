"""`make test`'s pytest: the deploy harness beside the rest, on the machine's second core.

    venv/bin/python -m tools.test_runner [PYTEST ARGS]

With no argument (the whole suite, as `make test` and CI run it), two pytest processes run at
once, inside the same `firebase emulators:exec` run:

* the deploy harness, the tests marked `deploy_harness` that talk to no emulator (real gcloud
  and the Firebase CLI against a local fake of Google's APIs: minutes of one core, no
  emulator, no shared state), its report kept and printed after the other;
* everything else, reported as it runs.

The exit status is the first failing one's (the main run's first), 0 when both pass. With
arguments (`make test T=... K=...`) one pytest runs exactly what was asked.

Why: the suite is one pytest process, about one core of two, and the harness is its longest
stretch that needs nothing the other tests use. An emulator test is never put beside another
one: they share the emulators and each starts from an empty database.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Sequence

HARNESS = "deploy_harness and not needs_emulators"
"""The tests that run beside the rest: `needs_emulators` is set at collection by
tests/conftest.py, before `-m` deselects, so a harness test that reaches an emulator stays in
the main run."""


def pytest(*args: str) -> list[str]:
    """The command line of a pytest run with `args`."""
    return [sys.executable, "-m", "pytest", *args]


def run_split() -> int:
    """The whole suite as two pytest runs at once; the harness's report printed last."""
    with tempfile.TemporaryFile("w+") as report:
        harness = subprocess.Popen(
            pytest("-m", HARNESS, "-p", "no:cacheprovider"),
            stdout=report,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            main = subprocess.call(pytest("-m", f"not ({HARNESS})"))
            done = harness.wait()
        except BaseException:
            harness.kill()
            harness.wait()
            raise
        report.seek(0)
        print(f"\n===== the deploy harness, run beside the tests above (-m '{HARNESS}') =====")
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
