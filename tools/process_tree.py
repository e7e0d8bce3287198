"""Stopping the Firebase CLI and every process it started: SIGINT to its group, then SIGKILL
to whatever is left below it (adopted as a child subreaper on Linux), reaped so none outlives
this process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

STOP_GRACE_SECONDS = 15.0
"""How long the CLI may take to stop its emulators after SIGINT before everything is killed."""


class Stop(Exception):
    """SIGTERM or SIGHUP arrived: stop the CLI and everything it started, then exit."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stop(signum: int, _frame: object) -> None:
    raise Stop(signum)


def become_subreaper() -> None:
    """On Linux, adopt orphaned descendants (PR_SET_CHILD_SUBREAPER), so a process whose parent
    died while stopping is still found among ours; elsewhere, do nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def descendants(root: int) -> list[int]:
    """Every living process below `root` (children, grandchildren...), from `ps`."""
    listing = subprocess.run(
        ["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True, check=False
    ).stdout
    children: dict[int, list[int]] = {}
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            children.setdefault(int(parts[1]), []).append(int(parts[0]))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found and child != os.getpid():
                found.append(child)
                todo.append(child)
    return found


def stop_tree(process: subprocess.Popen[bytes]) -> None:
    """Stop the CLI gracefully (SIGINT to its group), then SIGKILL whatever it left running."""
    started = set(descendants(process.pid)) | {process.pid}
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=STOP_GRACE_SECONDS)
    # Linux: orphans were adopted by this process, so they are its descendants now.
    left = set(descendants(os.getpid()))
    if not sys.platform.startswith("linux"):
        left |= started
    for pid in left | {process.pid}:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # a detached process leads its own group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
    _reap(left - {process.pid})


def _reap(killed: set[int], seconds: float = 10.0) -> None:
    """Wait (at most `seconds`) until every killed process has really ended, collecting the exit
    status of adopted orphans, so that none outlives this process, not even as a zombie: SIGKILL
    is delivered at once, but a large process takes a moment to die."""
    pending = set(killed)
    deadline = time.monotonic() + seconds
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    pending.discard(pid)
            except ChildProcessError:  # not (or no longer) our child: wait until it is gone
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    pending.discard(pid)
                except PermissionError:
                    pass
        if pending:
            time.sleep(0.05)
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
