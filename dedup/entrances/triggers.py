"""`trigger_once`: one decorator for every supported event kind, a thin adapter over
`Deduplicator.run`.

    @firestore_fn.on_document_written(document="posts/{postId}")
    @trigger_once("countPosts", mode=Mode.TRANSACTION)
    def count_posts(event: firestore_fn.Event[...], delivery: Delivery) -> None:
        ...

    @functions_framework.aio.cloud_event
    @trigger_once("notifyAsync")
    async def notify(event: CloudEvent, delivery: AsyncDelivery) -> None:
        ...

The decorated function takes the event only, so it sits under firebase-functions decorators
and `@functions_framework.cloud_event` alike; an `async def` handler becomes an `async def`
function (run by `dedup.aio.AsyncDeduplicator`) for `functions_framework.aio.cloud_event`.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol, cast, overload

from dedup.entrances.answer_table import Door, answer, given_up
from dedup.entrances.gate import EVENTS, gate
from dedup.entrances.suffixes import DEFAULT_REGISTRY, SuffixRegistry
from dedup.errors import GivenUp, LeaseHeld, MissingEventId
from dedup.kernel.delivery import Delivery, mark_entered
from dedup.kernel.record import RERUN, Mode
from dedup.kinds import USES_DEDUP, describe
from dedup.platform.propagation import continued, from_event

__all__ = [
    "DEDUPLICATOR_OF",
    "DEFAULT_REGISTRY",
    "AsyncEventFunction",
    "AsyncEventHandler",
    "EventHandler",
    "HandlerDecorator",
    "SuffixRegistry",
    "trigger_once",
]

if TYPE_CHECKING:  # dedup.aio (the async client's stack) is imported for async handlers only
    from dedup.aio.delivery import AsyncDelivery
    from dedup.aio.front_door import AsyncDeduplicator
    from dedup.config import DedupConfig
    from dedup.kernel.delivery import EventOptions, Outcome, Reconcile
    from dedup.kernel.front_door import Deduplicator

DEDUPLICATOR_OF = "__dedup_deduplicator__"
"""The attribute `trigger_once` sets on the function it returns: a function of no argument that
returns the deduplicator its deliveries run on (made on the first call). The SDK's decorators
copy it onto theirs, as they copy `dedup.kinds.USES_DEDUP`; `dedup.testing`'s crash helpers read
it to watch a function's deliveries."""

type EventHandler[E] = Callable[[E, Delivery], None]
"""A decorated handler: `handler(event, delivery) -> None`."""

type AsyncEventHandler[E] = Callable[[E, AsyncDelivery], Awaitable[None]]
"""A decorated async handler: `async def handler(event, delivery) -> None`."""

type AsyncEventFunction[E] = Callable[[E], Coroutine[Any, Any, None]]
"""What an async handler becomes: `async def fn(event) -> None`."""


class HandlerDecorator(Protocol):
    """What `trigger_once(...)` returns: turns `handler(event, delivery)` into `fn(event)`, an
    `async def` one for an `async def` handler."""

    @overload
    def __call__[E](self, handler: AsyncEventHandler[E], /) -> AsyncEventFunction[E]: ...

    @overload
    def __call__[E](self, handler: EventHandler[E], /) -> Callable[[E], None]: ...

    def __call__(self, handler: Any, /) -> Any:
        """Wrap `handler`; the result takes the event only."""
        ...


def trigger_once(
    suffix: str,
    *,
    mode: Mode = Mode.LEASE,
    config: DedupConfig | None = None,
    deduplicator: Deduplicator | AsyncDeduplicator | None = None,
    registry: SuffixRegistry | None = None,
    event_id_from: Callable[[Any], str | None] | None = None,
    reconcile: Reconcile | None = None,
    on_ambiguous: str = RERUN,
) -> HandlerDecorator:
    """Make a handler's effect happen once per event, however often the event is delivered.

    `suffix` names the function (1-100 of `[A-Za-z0-9_]`, unique in the process); it is
    checked here, at import time (`InvalidSuffix`, `DuplicateSuffix`). The default
    deduplicator is created on the first delivery, not here. The wrapper extracts the event
    id, payload fingerprint, time and document path (`dedup.kinds.describe`) and runs the handler
    through the deduplicator: it returns None when the platform should stop retrying, and
    raises when it should retry (`LeaseHeld`, `LeaseLost`, `StoreUnavailable`, the handler's
    own error). Pass `config` for a shared deduplicator with that config, or a `deduplicator`.

    A `def` handler gets a `Delivery` and becomes a `def fn(event)` run by `Deduplicator`; an
    `async def` handler gets an `AsyncDelivery` (its client an `AsyncClient`) and becomes an
    `async def fn(event)` run by `dedup.aio.AsyncDeduplicator`, with the same modes and
    guarantees. A `deduplicator` of the other kind is refused here (`ConfigError`).

    `event_id_from(event)` replaces the event's id as the dedup id, to run once per business
    entity rather than once per event: `event_id_from=lambda e: f"post-{e.params['postId']}"`
    notifies once per post, however many writes publish it. It must be deterministic. Events
    sharing a key then differ by design, so their payloads are not compared.

    Lease mode's one window (an attempt produced the effect, then died or lost the store before
    "sent" was recorded) is each function's choice: on a delivery that takes over such an
    attempt's expired lease, `reconcile(delivery)` is asked first (True: the effect happened,
    recorded as sent with `reconciled: true`; False: the handler runs; None: cannot tell;
    `async def` allowed for an `async def` handler), then `on_ambiguous` decides: "rerun"
    (default) runs the handler again with the same key, "skip" records `unknown` and returns
    (at most once). `ConfigError` here for any other value or a `reconcile` not callable.
    """
    entry = gate(EVENTS, suffix, mode, config, deduplicator, registry, reconcile, on_ambiguous)

    def options_for(
        event: object, function: Callable[[], EventOptions]
    ) -> tuple[str | None, EventOptions]:
        """The dedup id of `event` and its options: the function's (`Entrance.options`, with
        its time budget), completed with the event's."""
        info = describe(event)
        event_id = info.event_id if event_id_from is None else event_id_from(event)
        return event_id, function()._replace(
            # Under event_id_from, different events share a key by design: no fingerprint.
            payload=info.payload if event_id_from is None else None,
            event_time=info.event_time,
            document_path=info.document_path,
            subject=info.subject,
            database=info.database,  # the records follow a named database's events
            source=info.source,
        )

    def decorate(handler: Any) -> Any:
        admitted = entry.admit(handler)
        _guard_functions_framework_app()
        # Resolved on the first delivery (not at import), then kept: the configuration is read
        # once per function, and later deliveries go straight to the front door.
        deduplicator = _resolved_once(admitted.deduplicator)
        function_options = _resolved_once(lambda: admitted.options)  # its budget, found once
        async_deduplicator = _resolved_once(admitted.async_deduplicator)
        if admitted.is_async:

            async def once_async(event: Any) -> None:
                mark_entered()
                with _answered():
                    event_id, options = options_for(event, function_options)

                async def run_async(delivery: AsyncDelivery) -> None:
                    await handler(event, delivery)

                runner = async_deduplicator()
                with _answered(), continued(from_event(event)):
                    outcome = await runner.run_event(event_id, suffix, run_async, options)
                    _settle(runner.config, outcome)

            setattr(once_async, USES_DEDUP, suffix)
            setattr(once_async, DEDUPLICATOR_OF, async_deduplicator)
            return admitted.identify(once_async)

        def once(event: Any) -> None:
            mark_entered()
            with _answered():
                event_id, options = options_for(event, function_options)

            def run_handler(delivery: Delivery) -> None:
                handler(event, delivery)

            with _answered(), continued(from_event(event)):
                runner = deduplicator()
                _settle(runner.config, runner.run_event(event_id, suffix, run_handler, options))

        setattr(once, USES_DEDUP, suffix)
        setattr(once, DEDUPLICATOR_OF, deduplicator)
        return admitted.identify(once)

    return cast(HandlerDecorator, decorate)


def _settle(config: DedupConfig, outcome: Outcome) -> None:
    """Return, so that the platform stops delivering the event; but raise `GivenUp` for an
    event given up on (`Outcome.gave_up`) that the answer table retries (under
    `config.on_give_up="nack"`), so that the transport counts the attempt and its dead-letter
    topic ends up keeping the event."""
    if outcome.gave_up and answer(given_up(config.on_give_up), Door.EVENT).retried:
        raise GivenUp(
            f"{outcome.key} is given up on (its record is failed, dead or unknown): answered "
            "500 so that the dead-letter topic keeps the event; after a fix, "
            f"`dedup revive {outcome.key}`, then redeliver it"
        )


@contextmanager
def _answered() -> Iterator[None]:
    """A live lease, an event without an id or an event given up on raised inside, as
    functions-framework answers them without a traceback: 500, 400 and 500
    (`dedup.entrances.answers`), still a `LeaseHeld`, a `MissingEventId` or a `GivenUp`. Where
    Flask is not loaded (no functions-framework), re-raised as is."""
    try:
        yield
    except (LeaseHeld, MissingEventId, GivenUp) as refused:
        if "flask" not in sys.modules:
            raise
        from dedup.entrances import answers

        if isinstance(refused, answers.ANSWERS):
            raise
        if isinstance(refused, LeaseHeld):
            raise answers.answer_lease_held(refused) from refused
        if isinstance(refused, GivenUp):
            raise answers.answer_given_up(refused) from refused
        raise answers.answer_missing_id(refused) from refused


def _resolved_once[T](make: Callable[[], T]) -> Callable[[], T]:
    """`make()` on the first call, the same value on every later one (thread-safe)."""
    found: list[T] = []
    lock = threading.Lock()

    def resolved() -> T:
        if not found:
            with lock:
                if not found:
                    found.append(make())
        return found[0]

    return resolved


def _guard_functions_framework_app() -> None:
    """Under functions-framework's app being built, answer unparseable requests 400
    (`dedup.entrances.answers.guard_app`)."""
    framework = sys.modules.get("functions_framework")
    if framework is not None:
        from dedup.entrances.answers import guard_app

        guard_app(framework.errorhandler)
