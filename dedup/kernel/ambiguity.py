"""An ambiguous take-over (`dedup.kernel.claims.takeover_ambiguous`): a function's choice
(`AmbiguityChoice`: `reconcile`, then `on_ambiguous`) and how the lease flow settles it.
docs/guarantees.md, "The ambiguous delivery", says what each answer does."""

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
    """A function's choice for an ambiguous take-over (`on_ambiguous`, `reconcile`), with the
    client and delivery types `reconcile`'s delivery is built from."""

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
    """An earlier attempt's notes, readable by `reconcile` without a lease; not writable."""

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


async def _ask(run: Run, choice: Ambiguity, notes: Any) -> bool | None:
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
    """Ask `reconcile`, then record "sent" (reconciled) or `unknown` and return the outcome;
    None: run the handler (`dedup.kernel.claims.after_ambiguity`)."""
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
    """Before burying an event whose last allowed lease expired, ask `reconcile`: True records
    "sent" (`reconciled: true`) fenced by the read and returns the outcome; else None."""
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
