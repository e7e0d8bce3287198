"""Giving a lease back before its handler started, its time spent (`give_back_unstarted`)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Protocol

from dedup.errors import LeaseLost, StoreUnavailable
from dedup.kernel.record import Fields, State
from dedup.kernel.transitions import released

if TYPE_CHECKING:
    from dedup.kernel.delivery import Outcome
    from dedup.kernel.run import Run


class HeldLease(Protocol):
    """The lease given back (a `dedup.kernel.lease.Lease`)."""

    ambiguous: bool
    """The claim took over an expired lease: the next delivery is ambiguous too."""

    async def write(
        self, fields: Fields, state: State, action: str, *, keeps_lease: bool = False
    ) -> None:
        """A write fenced by the lease's last one (`dedup.kernel.lease.Lease.write`)."""
        ...


async def give_back_unstarted(
    run: Run, lease: HeldLease, spender: str = "claiming the lease"
) -> Outcome:
    """Give `lease` back unstarted, its time (budget or lease) spent by `spender`: the attempt
    is handed back, an ambiguous take-over stays ambiguous; then raise `BudgetSpent`."""
    error = (
        f"the time budget was spent, or the lease's time on this instance's clock, by "
        f"{spender}; the handler did not start"
    )
    if ambiguous := lease.ambiguous:  # a give-back settles nothing: the next is ambiguous too
        error += " (the lease it took over had expired: the next delivery is ambiguous)"
    expire_at, attempts = run.expire_at(), run.attempt - 1
    fields = released(error=error, expire_at=expire_at, attempts=attempts, ambiguous=ambiguous)
    with contextlib.suppress(StoreUnavailable, LeaseLost):  # else the lease simply expires
        await lease.write(fields, State.IN_PROGRESS, "release")
    run.spent(f"start the handler of (spent by {spender})")
