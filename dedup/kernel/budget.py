"""A delivery's time, in one place (`Budget`, on one injectable clock): its length and which
bound that is, its end, the end of the writes after its handler, its lease's end as this
instance sees it, each RPC's timeout and each pause. Nothing else in the kernel computes a
deadline from a clock. For users: docs/configuration.md, "The time budget of a delivery".
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Literal, NamedTuple, Protocol

MARGIN = 0.1
"""The share of a delivery's budget (at most 1 s) kept for the floors of the last tries and a
rollback: its work ends that much before its length."""

AFTER_HANDLER_MARGIN = 0.2
"""How long before the function's timeout the writes after the handler stop being tried
(`Budget.after_handler`): room for the last try's floor and the answer."""

FLOOR = 0.1
"""The least time an RPC is given, even at (or past) the end of its budget."""

LEASE_MARGIN = 0.1
"""The share of `lease_seconds` (at most 1 s) by which a delivery counts its lease ended early
before it starts a step's function or the handler (`Budget.lease_late`)."""

BudgetSource = Literal["function_timeout", "declared_timeout", "lease"]
"""Which bound a delivery's time budget is (`Budget.length_of`), logged as `budget_source`."""


class TimeBudget(NamedTuple):
    """How long one delivery may take, and which bound that is."""

    seconds: float
    source: BudgetSource


class BudgetSettings(Protocol):
    """What a delivery's `Budget` reads from its `DedupConfig`."""

    @property
    def rpc_timeout_seconds(self) -> int:
        """Each RPC's timeout (DEDUP_RPC_TIMEOUT_SECONDS)."""
        ...

    @property
    def budget_clock(self) -> Callable[[], float] | None:
        """The budget's clock (None: `time.monotonic`)."""
        ...


class Budget:
    """An end on a clock, and what it gives each RPC and each pause: a delivery's
    (`of_delivery`), its writes' after the handler (`after_handler`), one store call's
    (`for_call`), or a call's outside any delivery (`of_call`)."""

    __slots__ = (
        "_lease_ends",
        "_longest_try",
        "_try_started",
        "clock",
        "ends",
        "length",
        "rpc_timeout",
        "started",
    )

    def __init__(
        self,
        ends: float,
        rpc_timeout: float,
        clock: Callable[[], float] | None = None,
        *,
        length: TimeBudget | None = None,
        started: float | None = None,
    ) -> None:
        """A budget ending at `ends` on `clock` (default: `time.monotonic`), each RPC given at
        most `rpc_timeout` seconds; `length`: a delivery's, what it was made from."""
        self.clock: Callable[[], float] = time.monotonic if clock is None else clock
        self.started = self.clock() if started is None else started
        self.ends = ends
        self.rpc_timeout = float(rpc_timeout)
        self.length = length
        self._lease_ends: float | None = None
        self._try_started: float | None = None
        self._longest_try = 0.0

    @staticmethod
    def length_of(
        function_timeout: int | None, declared_timeout: int | None, lease: int, rpc_timeout: int
    ) -> TimeBudget:
        """How long one delivery may take, and which bound that is: `function_timeout` when
        set; else `declared_timeout` when the lease covers it; else the longest timeout the
        lease covers, `lease` - `rpc_timeout` (at least 1 s)."""
        if function_timeout is not None:
            return TimeBudget(float(function_timeout), "function_timeout")
        covered = max(1, lease - rpc_timeout)
        if declared_timeout is not None and 0 < declared_timeout <= covered:
            return TimeBudget(float(declared_timeout), "declared_timeout")
        return TimeBudget(float(covered), "lease")

    @classmethod
    def of_delivery(cls, length: TimeBudget, settings: BudgetSettings) -> Budget:
        """A delivery's budget, started now: `length` less `MARGIN` of it (at most 1 s)."""
        clock = time.monotonic if settings.budget_clock is None else settings.budget_clock
        started, seconds = clock(), length.seconds
        ends = started + seconds - min(1.0, MARGIN * seconds)
        return cls(ends, settings.rpc_timeout_seconds, clock, length=length, started=started)

    @classmethod
    def of_call(
        cls, rpc_timeout: float, seconds: float | None, clock: Callable[[], float] | None = None
    ) -> Budget:
        """The budget of a store call made outside any delivery, started now: `seconds`, or no
        end of its own when None (then each RPC gets `rpc_timeout`)."""
        call = cls(math.inf, rpc_timeout, clock)
        if seconds is not None:
            call.ends = call.started + seconds
        return call

    def for_call(self, *, one_rpc: bool = False) -> Budget:
        """The budget of one store call started now, its retries included: what is left of
        this one, `FLOOR` at least; `one_rpc`: at most the RPC timeout too."""
        now = self.clock()
        left = self.ends - now
        ends = now + max(FLOOR, min(self.rpc_timeout, left) if one_rpc else left)
        return Budget(ends, self.rpc_timeout, self.clock, started=now)

    def now(self) -> float:
        """The clock's reading (when a write is sent: the lease it renews runs from then)."""
        return self.clock()

    def elapsed(self) -> float:
        """Seconds since the budget started."""
        return self.clock() - self.started

    def left(self) -> float:
        """Seconds left (0 or less: spent)."""
        return self.ends - self.clock()

    def rpc(self, floor: float = FLOOR) -> float:
        """The deadline of the next RPC, its retries included (ask right before it): the RPC
        timeout, cut to what is left, `floor` at least."""
        return max(floor, min(self.rpc_timeout, self.ends - self.clock()))

    def pause(self, seconds: float) -> float:
        """A backoff pause of `seconds`, cut to what is left (never negative)."""
        return max(0.0, min(seconds, self.ends - self.clock()))

    def affords(self, pause: float) -> bool:
        """Whether a pause of `pause` seconds ends before the budget does."""
        return self.clock() + pause < self.ends

    def affords_try(self) -> bool:
        """Before each try of a transaction or batch: whether what is left covers the longest
        try so far."""
        now = self.clock()
        if self._try_started is not None:
            self._longest_try = max(self._longest_try, now - self._try_started)
        left = self.ends - now
        if left <= 0 or left < self._longest_try:
            return False
        self._try_started = now
        return True

    def lease_from(self, sent: float, seconds: float) -> None:
        """The delivery's lease runs `seconds` from `sent` (`now()` when the write that took
        or renewed it was sent): a lower bound of its end on this clock."""
        self._lease_ends = sent + seconds

    def lease_left(self) -> float:
        """Seconds left of the lease this delivery holds (`lease_from`), on this clock."""
        assert self._lease_ends is not None, "no lease: lease_from was not called"
        return self._lease_ends - self.clock()

    def lease_late(self, lease_seconds: float) -> float:
        """How late it is to start a step or the handler under the lease (`lease_from`) of
        `lease_seconds`, in seconds on this clock: `LEASE_MARGIN` of it (at most 1 s) less
        `lease_left`; negative while there is time, 0 or more once the lease may have ended."""
        assert self._lease_ends is not None, "no lease: lease_from was not called"
        return min(1.0, LEASE_MARGIN * lease_seconds) - (self._lease_ends - self.clock())

    def after_handler(self) -> Budget:
        """The budget of the writes after the handler: until the function's timeout less
        `AFTER_HANDLER_MARGIN`, never before this budget's end nor past the lease's."""
        assert self.length is not None, "after_handler: a delivery's budget only"
        ends = max(self.ends, self.started + self.length.seconds - AFTER_HANDLER_MARGIN)
        if self._lease_ends is not None:
            ends = min(ends, self._lease_ends)
        return Budget(ends, self.rpc_timeout, self.clock, started=self.started)
