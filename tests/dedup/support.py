"""Support code shared by the dedup tests: `from tests.dedup.support import ...`.

(Fixtures live in `conftest.py`; plain functions that tests call live here.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from google.cloud import firestore

from dedup import Mode, State
from dedup.kernel.transitions import new_record

ROOT = Path(__file__).resolve().parents[2]
WORKER_MODULE = "tests.dedup.crash_worker"


def standing_clock() -> float:
    """A budget clock (`DedupConfig.budget_clock`) that never moves: a delivery on it counts no
    time spent, so a busy machine's pauses never make it give its lease back before a step or
    the handler (`Budget.lease_late`) nor spend its time budget. Its lease is still judged by
    Firestore, on the database clock: a test that expires a lease by waiting still expires it.
    For tests whose subject is not the instance's own clock (test_budget_clock.py drives it)."""
    return 0.0


STALE_LEASE_SECONDS = 3
"""The lease of a delivery a test lets go stale (it sleeps past it, then a successor takes it
over). On `standing_clock` each of the stale owner's writes gets this long for its one RPC,
which a busy machine's emulator answers well within. With a 1 s lease on the real clock, 1 of
40 runs under three busy loops failed: the write after the sleep got 0.1 s and timed out."""


KILLED_LEASE_SECONDS = 10
"""The lease of a worker a test SIGKILLs inside its handler, then checks that a redelivery is
held off (LeaseHeld) before the lease ends: from the worker's claim to that redelivery's read
there are its effect's write, a line on a pipe, a SIGKILL and the wait for it, and a new
deduplicator's first RPC, each of which a busy machine may stretch past a second (with a 3 s
lease the check could meet an expired lease and see the event run at once). The test then
waits this long for the lease to end on the database clock."""


def start_worker(*args: str) -> subprocess.Popen[str]:
    """Start `python -m tests.dedup.crash_worker ARGS` from the repository root, with this
    process's (emulator) environment."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", WORKER_MODULE, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def kill_inside_handler(*args: str) -> None:
    """Start a `--hang` worker with `args`, wait until its handler has started (its effect
    made or buffered), SIGKILL it and wait for it to be gone."""
    kill_when_started(*args, "--hang")


def kill_when_started(*args: str) -> None:
    """Start a worker with `args` (`--hang` or `--die-after-effect`), wait until it prints
    STARTED, SIGKILL it and wait for it to be gone."""
    worker = start_worker(*args)
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == "STARTED"
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)


def write_foreign_lease(
    client: firestore.Client, key: str, *, started: datetime | object, attempts: int = 1
) -> None:
    """Create `triggerEvents/<key>` as a delivery that took a 60 s lease at `started` (a
    datetime, or SERVER_TIMESTAMP for "now" on the database clock) and never finished."""
    event_id, suffix = key.rsplit("-", 1)
    fields = new_record(
        event_id=event_id,
        suffix=suffix,
        mode=Mode.LEASE,
        state=State.IN_PROGRESS,
        owner="crashed-owner",
        leased=True,
        lease_seconds=60,
        payload_hash=None,
        expire_at=datetime.now(UTC) + timedelta(days=7),
        attempts=attempts,
    )
    fields["leaseStartedAt"] = started
    client.collection("triggerEvents").document(key).create(fields)
