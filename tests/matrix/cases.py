"""The conformance matrix as data: every failure point, its script and what it must end in.

A case is (mode, trigger kind, failure point). A point is a script of steps played on one
backend (the in-memory store, or the Firestore emulator) with a fault plan, and its expected
`Result`: the answers the platform got (stop, retry or crash, in order), the record's final
state and attempts, and how many effects happened. The expectation depends on the mode only:
every trigger kind must end the same way, which is the conformance the matrix checks.

Steps:

* `("seed", kind)`: write a record before any delivery: `live` (another delivery's lease, live),
  `expired` (its lease expired, attempts left), `crashed` (expired on the last allowed attempt);
* `("deliver", behaviour)`: one delivery on the current instance; the handler's behaviour is
  `ok` (its effect), `raise` (a retryable error), `terminal` (`TerminalError`), `crash`
  (the process dies: `Crash`), `stale` (it outlives its lease: meanwhile another instance
  delivers the event to the end), `other-payload` (ok, with a different payload);
* `("expire",)`: the database clock passes every lease; the next delivery lands on another
  instance;
* `("storm", n)`: n deliveries at once, each on its own instance (their answers are only
  checked to be stop or retry).

Effects: in lease mode the handler's effect is outside Firestore (a list in the test); in the
atomic modes it is a document written through the delivery's transaction or batch, so only a
committed one counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dedup import Mode
from dedup.kernel.record import State
from tests.dedup.grpc_faults import Fault, Plan
from tests.dedup.support import standing_clock
from tests.matrix.kinds import CRASH, RETRY, STOP, TIMED_KINDS

MAX_ATTEMPTS = 3
LEASE_SECONDS = 3
"""Short, so that the emulator's half can let a lease expire by waiting; not shorter, since the
second of two deliveries must meet the first's lease still live on a loaded machine (at 1 s, a
pause between them expired it in one full `make test` of four runs)."""
STORM = 6


@dataclass(frozen=True)
class Result:
    """How a case ended."""

    answers: tuple[str, ...]
    state: State | None
    attempts: int
    effects: int


@dataclass(frozen=True)
class Point:
    """A failure point: its steps, its faults, its config, and its expected result per mode."""

    steps: tuple[tuple[Any, ...], ...]
    expected: dict[Mode, Result]
    faults: dict[Mode, Plan] = field(default_factory=dict)
    """Per mode: the fault plan of the store's RPCs (default: none)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """DedupConfig settings beyond the matrix's."""
    kinds: frozenset[str] | None = None
    """The trigger kinds it applies to (None: all)."""


def _commits(numbers: set[int] | None, fault: Fault, first: int = 1) -> Plan:
    """`fault` on the listed `Commit` calls (None: on every one from `first` on)."""

    def plan(method: str, n: int) -> Fault:
        if method != "Commit":
            return Fault.PASS
        hit = n >= first if numbers is None else n in numbers
        return fault if hit else Fault.PASS

    return plan


def _same(result: Result) -> dict[Mode, Result]:
    return dict.fromkeys(Mode, result)


def _lease_or_atomic(lease: Result, atomic: Result) -> dict[Mode, Result]:
    return {Mode.LEASE: lease, Mode.TRANSACTION: atomic, Mode.WRITE_ONLY: atomic}


# The commit that records the outcome: lease mode's second (after the claim), the atomic
# modes' first (the writes and the marker together).
_OUTCOME_COMMIT = {Mode.LEASE: 2, Mode.TRANSACTION: 1, Mode.WRITE_ONLY: 1}


def _on_outcome(fault: Fault, *, onwards: bool = False) -> dict[Mode, Plan]:
    return {
        mode: _commits(None, fault, n) if onwards else _commits({n}, fault)
        for mode, n in _OUTCOME_COMMIT.items()
    }


SENT_ONCE = Result((STOP,), State.SENT, 1, 1)

POINTS: dict[str, Point] = {
    "fresh event": Point((("deliver", "ok"),), _same(SENT_ONCE)),
    "duplicate": Point(
        (("deliver", "ok"), ("deliver", "ok")), _same(Result((STOP, STOP), State.SENT, 1, 1))
    ),
    "live lease": Point(
        (("seed", "live"), ("deliver", "ok")),
        _same(Result((RETRY,), State.IN_PROGRESS, 1, 0)),
    ),
    "expired lease": Point(
        (("seed", "expired"), ("deliver", "ok")), _same(Result((STOP,), State.SENT, 2, 1))
    ),
    "crashed lease": Point(
        (("seed", "crashed"), ("deliver", "ok")),
        _same(Result((STOP,), State.DEAD, MAX_ATTEMPTS, 0)),
    ),
    "handler raises": Point(
        (("deliver", "raise"), ("deliver", "ok")),
        _same(Result((RETRY, STOP), State.SENT, 2, 1)),
    ),
    "handler fails terminally": Point(
        (("deliver", "terminal"), ("deliver", "ok")),
        _same(Result((STOP, STOP), State.FAILED, 1, 0)),
    ),
    "handler crashes": Point(
        (("deliver", "crash"), ("deliver", "ok"), ("expire",), ("deliver", "ok")),
        _lease_or_atomic(
            Result((CRASH, RETRY, STOP), State.SENT, 2, 1),
            # Nothing of a crashed atomic attempt committed: the next delivery runs at once.
            Result((CRASH, STOP, STOP), State.SENT, 1, 1),
        ),
    ),
    "contention": Point(
        (("storm", STORM), ("deliver", "ok")), _same(Result((STOP,), State.SENT, 1, 1))
    ),
    "lost commit response": Point(
        (("deliver", "ok"), ("deliver", "ok")),
        _same(Result((STOP, STOP), State.SENT, 1, 1)),
        faults=_on_outcome(Fault.LOSE_RESPONSE),
        # Its subject is the read that finds the lost commit, not the budget: on the real clock
        # a busy machine spent the 1.8 s budget of a 3 s lease on the claim, the commit and
        # its rollback, left that read its 0.1 s floor, and the delivery answered retry.
        settings={"budget_clock": standing_clock},
    ),
    "store error before the claim": Point(
        (("deliver", "ok"), ("deliver", "ok")),
        _lease_or_atomic(
            Result((RETRY, STOP), State.SENT, 1, 1),
            Result((RETRY, STOP), State.SENT, 1, 1),
        ),
        faults={mode: _commits({1}, Fault.DENY) for mode in Mode},
    ),
    "store error on sent": Point(
        (("deliver", "ok"), ("deliver", "ok")),
        _lease_or_atomic(
            # The effect happened: the owner keeps trying to record it until its lease ends.
            Result((STOP, STOP), State.SENT, 1, 1),
            # Nothing committed: the platform retries the whole attempt.
            Result((RETRY, STOP), State.SENT, 1, 1),
        ),
        faults=_on_outcome(Fault.DENY),
    ),
    "store error for the rest of the lease": Point(
        (("deliver", "ok"),),
        _lease_or_atomic(
            Result((RETRY,), State.IN_PROGRESS, 1, 1),
            Result((RETRY,), None, 0, 0),
        ),
        faults=_on_outcome(Fault.DEADLINE, onwards=True),
    ),
    "stale owner": Point(
        (("deliver", "stale"),),
        _lease_or_atomic(
            # The other delivery finished first; the stale owner ran too (the documented
            # window) and recorded nothing: LeaseLost.
            Result((STOP, RETRY), State.SENT, 2, 2),
            # The other delivery's marker made the stale attempt's commit fail: a duplicate.
            Result((STOP, STOP), State.SENT, 1, 1),
        ),
    ),
    "payload mismatch": Point(
        (("deliver", "ok"), ("deliver", "other-payload")),
        _same(Result((STOP, STOP), State.SENT, 1, 1)),
    ),
    "too old": Point(
        (("deliver", "ok"),),
        _same(Result((STOP,), None, 0, 0)),
        settings={"max_event_age_seconds": 60},
        kinds=TIMED_KINDS,
    ),
}
"""Every failure point of the matrix."""
