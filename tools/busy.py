"""Run a command while busy loops load every core: how a test is checked for independence of
the machine's load (docs/testing.md, "Under load").

    venv/bin/python -m tools.busy 3 -- /tmp/tools/own-pytest -q -p tools.repeat --repeat 20 X

starts 3 processes that spin (`while True: pass`), runs the command, then ends the loops it
started (by their process ids, whatever the command did) and exits with the command's status.
On a 2-core machine 3 loops keep both cores busy, so a test under it gets a fraction of a core
at unpredictable moments, as it does when other work shares the machine.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

SPIN = "while True: pass"
"""The code of each busy loop."""


@contextmanager
def busy(loops: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`loops` busy processes for the duration of the block; each is killed and reaped when the
    block ends, normally or by an exception (KeyboardInterrupt included)."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(loops):
            started.append(subprocess.Popen([sys.executable, "-c", SPIN]))
        yield started
    finally:
        for process in started:
            process.kill()
        for process in started:
            process.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """`busy.py LOOPS -- COMMAND...`: the command's exit status, run under `LOOPS` busy loops."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.busy", description=__doc__.split("\n")[0]
    )
    parser.add_argument("loops", type=int, help="busy loops to start (3 keeps 2 cores busy)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.loops < 0 or not command:
        parser.error("give a number of loops (0 or more), then -- and the command to run")
    with busy(args.loops):
        return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
