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

Nothing here runs on a delivery that is not ambiguous: `give_ambiguity_choice` only stores the
choice on the run.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from dedup.claims import ON_AMBIGUOUS
from dedup.delivery import SYNC_DELIVERIES, DeliveryKinds, is_async_handler
from dedup.errors import ConfigError
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


def give_ambiguity_choice(
    run: Run,
    client: Any,
    reconcile: Reconcile | None,
    on_ambiguous: str,
    kinds: DeliveryKinds = SYNC_DELIVERIES,
) -> None:
    """Give `run` its function's choice for an ambiguous take-over; `reconcile` gets the
    delivery of `kinds` on `client`, as the handler would."""
    run.on_ambiguous = on_ambiguous
    if reconcile is None:
        return

    async def ask() -> bool | None:
        answer: Any = reconcile(run.delivery(client, None, kinds))
        if inspect.isawaitable(answer):
            answer = await answer
        if answer is not None and not isinstance(answer, bool):
            raise ConfigError(
                f"{run.path}: reconcile returned {answer!r}; it must return True (the effect "
                "happened), False (it did not) or None (cannot tell)"
            )
        return answer

    run.reconcile = ask
