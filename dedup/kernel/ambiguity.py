"""What a delivery does when it may repeat an effect: `reconcile` and `on_ambiguous`.

Lease mode has one window (docs/guarantees.md): an attempt produced the effect, then died or
lost the store for the rest of its lease before "sent" was recorded. The next delivery takes
over an expired lease; that take-over is ambiguous (`dedup.kernel.claims.takeover_ambiguous`). What
it does then is each function's choice, given to its entrance (`trigger_once`, `task_once`,
`idempotent_http`, `idempotent_callable`) or to `Deduplicator.run`:

* `reconcile(delivery)`, asked first: True (the effect happened: "sent", `reconciled: true`,
  the handler does not run), False (it did not: the handler runs) or None (cannot tell). It
  may read `delivery.notes`, what the earlier attempt noted before its effect. For an
  `async def` handler it may be an `async def` too. The handler starts after it only while the
  lease is live and the budget not spent, by the delivery's clock (`dedup.kernel.lease`): a
  `reconcile` that took that time gives the lease back, still ambiguous;
* `on_ambiguous`, when nothing could tell: "rerun" (the default, the handler runs again with the
  same `Delivery.key`) or "skip" (the record ends `unknown`, the delivery is acknowledged: at
  most once; `dedup revive` runs it again on purpose).

Nothing here runs on a delivery that is not ambiguous: a function that made a choice gives its
`Run` an `AmbiguityChoice` when the run is made, which the lease flow asks only on an
ambiguous take-over.
"""

from __future__ import annotations

import inspect
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dedup.errors import ConfigError
from dedup.kernel.claims import AfterAmbiguity, after_ambiguity
from dedup.kernel.delivery import (
    NO_NOTES,
    SYNC_DELIVERIES,
    DeliveryKinds,
    Outcome,
    Reconcile,
    RunNotes,
)
from dedup.kernel.record import RERUN, OutcomeKind, Record, State, error_text
from dedup.kernel.transitions import fence_of, fenced_write, finished

if TYPE_CHECKING:
    from dedup.kernel.flow_io import Ambiguity, FencedLease
    from dedup.kernel.record import Snapshot
    from dedup.kernel.run import Run


@dataclass(frozen=True)
class AmbiguityChoice:
    """A function's choice for an ambiguous take-over, given to a `Run` when it is made: what
    `on_ambiguous` says, and `reconcile` with what it needs to build its delivery (the client
    and the delivery types of the handler's side, sync or async)."""

    on_ambiguous: str = RERUN
    reconcile: Reconcile | None = None
    client: Any = None
    kinds: DeliveryKinds = SYNC_DELIVERIES

    async def ask(self, run: Run, notes: RunNotes) -> bool | None:
        """`reconcile`'s verdict on the delivery of `run` whose notes are `notes` (None
        without a `reconcile`); `ConfigError` for an answer that is not True, False or None."""
        if self.reconcile is None:
            return None
        answer: Any = self.reconcile(run.delivery(self.client, notes, self.kinds))
        if inspect.isawaitable(answer):
            answer = await answer
        if answer is not None and not isinstance(answer, bool):
            raise ConfigError(
                f"{run.path}: reconcile returned {answer!r}; it must return True (the effect "
                "happened), False (it did not) or None (cannot tell)"
            )
        return answer


@dataclass(frozen=True)
class PastNotes:
    """What an earlier attempt noted, as `reconcile` reads it on a delivery that holds no lease
    (before burying an event): readable, not writable."""

    run: Run
    notes: Mapping[str, Any]

    def time_left(self) -> float:
        """What is left of the delivery's time budget."""
        return self.run.budget.left()

    def note(self, fields: dict[str, Any]) -> Coroutine[Any, Any, None]:
        """Refused: nothing may be noted without the lease."""
        raise ConfigError(f"{self.run.path}: delivery.note is for a handler holding the lease")

    def run_step(self, name: str, *call: Any) -> Coroutine[Any, Any, Any]:
        """Refused: `reconcile` runs no steps."""
        raise ConfigError(f"{self.run.path}: delivery.step is for a handler holding the lease")


# The lease flow's two questions to `reconcile` (`dedup.kernel.lease`).


async def _ask(run: Run, choice: Ambiguity, notes: Any) -> bool | None:
    """`reconcile`'s answer (None without one), its delivery's notes read from `notes`. One
    that raises is reported and re-raised: nothing is written, so the next delivery after this
    lease asks again."""
    try:
        return await choice.ask(run, notes)
    except Exception as exc:
        run.finish(
            OutcomeKind.UNAVAILABLE,
            error=f"reconcile raised {error_text(exc)}; the next delivery after this "
            "lease asks again",
        )
        raise


async def settle_ambiguity(run: Run, lease: FencedLease, choice: Ambiguity) -> Outcome | None:
    """An ambiguous take-over (`dedup.kernel.claims.after_ambiguity`): ask `reconcile`, then record
    "sent" (reconciled) or `unknown` and return the outcome; None: run the handler."""
    verdict = await _ask(run, choice, lease)
    after = after_ambiguity(verdict, choice.on_ambiguous)
    if after is AfterAmbiguity.RUN:
        return None
    owner = lease.owner
    if after is AfterAmbiguity.RECONCILED:
        fields = finished(State.SENT, owner=owner, expire_at=run.expire_at(), reconciled=True)
        await lease.write(fields, State.SENT, "mark sent")
        run.sent_keys.add(run.key, run.payload_hash)
        return run.finish(OutcomeKind.RECONCILED)
    fields = finished(State.UNKNOWN, owner=owner, expire_at=run.expire_at())
    await lease.write(fields, State.UNKNOWN, "mark unknown")
    return run.finish(OutcomeKind.AMBIGUOUS)


async def reconcile_before_burial(
    run: Run, record: Record, snapshot: Snapshot, owner: str
) -> Outcome | None:
    """The last allowed attempt's lease expired: before burying the event, ask `reconcile`
    whether that attempt produced the effect. True records "sent" (`reconciled: true`),
    guarded by the record as read; anything else returns None (mark it dead). A reconcile that
    raises writes nothing and is asked again by the next delivery."""
    assert run.ambiguity is not None
    verdict = await _ask(run, run.ambiguity, PastNotes(run, record.notes or NO_NOTES))
    if verdict is not True:
        return None
    fields = finished(State.SENT, owner=owner, expire_at=run.expire_at(), reconciled=True)
    budget = run.budget.after_handler()
    written = await fenced_write(run.io, run.key, fields, fence_of(snapshot), "mark sent", budget)
    if not isinstance(written, datetime):
        return None  # the record moved meanwhile: burying it re-reads and decides again
    run.sent_keys.add(run.key, run.payload_hash)
    return run.finish(OutcomeKind.RECONCILED)
