"""What a delivery does when it may repeat an effect: `reconcile` and `on_ambiguous`.

Lease mode has one window (docs/guarantees.md): an attempt produced the effect, then died or
lost the store for the rest of its lease before "sent" was recorded. The next delivery takes
over an expired lease; that take-over is ambiguous (`dedup.claims.takeover_ambiguous`). What
it does then is each function's choice, given to its entrance (`trigger_once`, `task_once`,
`idempotent_http`, `idempotent_callable`) or to `Deduplicator.run`:

* `reconcile(delivery)`, asked first: True (the effect happened: "sent", `reconciled: true`,
  the handler does not run), False (it did not: the handler runs) or None (cannot tell). It
  may read `delivery.notes`, what the earlier attempt noted before its effect. For an
  `async def` handler it may be an `async def` too;
* `on_ambiguous`, when nothing could tell: "rerun" (the default, the handler runs again with the
  same `Delivery.key`) or "skip" (the record ends `unknown`, the delivery is acknowledged: at
  most once; `dedup revive` runs it again on purpose).

Nothing here runs on a delivery that is not ambiguous: a function that made a choice gives its
`Run` an `AmbiguityChoice` when the run is made, which the lease flow asks only on an
ambiguous take-over.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dedup.delivery import SYNC_DELIVERIES, DeliveryKinds, RunNotes
from dedup.errors import ConfigError
from dedup.handler_shape import is_async_handler
from dedup.record import ON_AMBIGUOUS, RERUN

if TYPE_CHECKING:
    from dedup.runs import Run

type Reconcile = Callable[[Any], bool | None] | Callable[[Any], Awaitable[bool | None]]
"""`reconcile(delivery) -> True | False | None`: did an earlier attempt produce the effect?
(`async def` allowed for `async def` handlers.)"""


def check_ambiguity(where: str, reconcile: object, on_ambiguous: object) -> None:
    """Refuse, naming `where`, an `on_ambiguous` other than "rerun" or "skip", or a
    `reconcile` that is not callable (`ConfigError`)."""
    if on_ambiguous not in ON_AMBIGUOUS:
        choices = ", ".join(repr(value) for value in ON_AMBIGUOUS)
        raise ConfigError(f"{where}: on_ambiguous={on_ambiguous!r} is not one of {choices}")
    if reconcile is not None and not callable(reconcile):
        raise ConfigError(
            f"{where}: reconcile={reconcile!r} is not callable; pass a function "
            "reconcile(delivery) -> True | False | None"
        )


def check_sync_reconcile(where: str, reconcile: object) -> None:
    """Refuse an `async def` reconcile for a `def` handler (nothing would await it)."""
    if reconcile is not None and is_async_handler(reconcile):
        raise ConfigError(
            f"{where}: reconcile is an async function but the handler is not: write reconcile "
            "with `def`, or make the handler `async def`"
        )


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
        return self.run.time_left()

    def note(self, fields: dict[str, Any]) -> Coroutine[Any, Any, None]:
        """Refused: nothing may be noted without the lease."""
        raise ConfigError(f"{self.run.path}: delivery.note is for a handler holding the lease")
