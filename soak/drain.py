"""When the soak's drain ends: a pure rule, apart from the processes it watches.

After `--seconds` the driver stops its kills, restarts and receiver faults, but every fault
inside the function processes goes on (lost responses, failing handlers, the handlers' own
SIGKILLs), and the platform keeps redelivering every unacknowledged copy. The drain ends:

* as soon as every copy is acknowledged;
* otherwise `seconds` (`--drain-seconds`, 90) after the later of the drain's start and the
  last process death: a process that dies inside a transaction-mode delivery leaves its
  transaction's lock on the document it read until the database expires it, 60 s after its
  last use, and the event's copies wait it out (docs/capacity.md, "A hot document under
  crashes"), so each death in the drain gives the copies that wait their full time again;
* in any case `cap_seconds` (`--drain-cap-seconds`, 600) after its start. A copy still
  unacknowledged then is reported by the checks as `not acknowledged`.

`Drain` holds the rule and its state (thread-safe: the driver's monitor reports deaths while
the main thread waits); `wait_for` runs it with a clock and a sleep that tests can replace.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

DRAIN_SECONDS = 90.0
DRAIN_CAP_SECONDS = 600.0
POLL_SECONDS = 0.2
"""How often `wait_for` looks at the unacknowledged copies."""


class Ended(Enum):
    """Why a drain ended."""

    ACKNOWLEDGED = "acknowledged"
    """Every copy was acknowledged."""
    QUIET = "quiet"
    """`seconds` passed since the later of the start and the last death."""
    CAP = "cap"
    """`cap_seconds` passed since the start."""


@dataclass
class Drain:
    """The drain rule: when it ends, given its start and the process deaths during it."""

    seconds: float = DRAIN_SECONDS
    cap_seconds: float = DRAIN_CAP_SECONDS
    started: float | None = None
    """When the drain started (the clock of `start`), None before."""
    deaths: int = 0
    """Process deaths reported since the start (`death`)."""
    last_death: float | None = None
    """The latest of those deaths."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def start(self, at: float) -> None:
        """The drain starts at `at`."""
        with self._lock:
            self.started = at

    def death(self, at: float) -> None:
        """A process died at `at`; counted only once the drain has started."""
        with self._lock:
            if self.started is None or at < self.started:
                return
            self.deaths += 1
            self.last_death = at if self.last_death is None else max(self.last_death, at)

    def ends_at(self) -> float:
        """When the drain ends unless every copy is acknowledged first: `seconds` after the
        later of the start and the last death, and never later than `cap_seconds` after the
        start."""
        with self._lock:
            if self.started is None:
                raise RuntimeError("the drain has not started: call start() first")
            quiet_from = max(self.started, self.last_death or self.started)
            return min(quiet_from + self.seconds, self.started + self.cap_seconds)

    def ended(self, now: float, unacknowledged: int) -> Ended | None:
        """Why the drain is over at `now` with `unacknowledged` copies left; None: not over."""
        if unacknowledged == 0:
            return Ended.ACKNOWLEDGED
        if now < self.ends_at():
            return None
        assert self.started is not None
        return Ended.CAP if now >= self.started + self.cap_seconds else Ended.QUIET


def wait_for(
    drain: Drain,
    unacknowledged: Callable[[], int],
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[Ended, float]:
    """Start `drain` now and wait until it ends; returns why and how long it ran (seconds)."""
    drain.start(clock())
    assert drain.started is not None
    while (why := drain.ended(clock(), unacknowledged())) is None:
        sleep(POLL_SECONDS)
    return why, clock() - drain.started
