"""What an `async def` handler is told (`AsyncDelivery`) and what it is (`AsyncHandler`).

The async twins of `dedup.kernel.delivery.Delivery` and its mode-specific kinds: the same identity
(`DeliveryIdentity`), with the `google.cloud.firestore.AsyncClient` of the deduplicator and,
in the atomic modes, its `AsyncTransaction` or `AsyncWriteBatch`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from google.cloud.firestore import AsyncClient, AsyncTransaction, AsyncWriteBatch

from dedup.kernel.delivery import DeliveryIdentity, HandlerResult

if TYPE_CHECKING:
    from dedup.kernel.delivery import DeliveryKinds


@dataclass(frozen=True)
class AsyncDelivery(DeliveryIdentity):
    """What an async handler learns about its delivery; pass `key` downstream as an
    Idempotency-Key."""

    client: AsyncClient
    """The deduplicator's async Firestore client (one per instance and event loop): await its
    calls for the handler's own reads and writes."""
    transaction: AsyncTransaction | None = field(default=None, kw_only=True)
    """Mode.TRANSACTION: `await transaction.get(ref)` to read, `transaction.set(...)` to write;
    the writes commit with the marker. Annotate the parameter as `AsyncTransactionDelivery`
    to have it typed as always present."""
    batch: AsyncWriteBatch | None = field(default=None, kw_only=True)
    """Mode.WRITE_ONLY: add writes (`batch.set(...)`, not awaited); they commit with the
    marker's create. Annotate the parameter as `AsyncWriteOnlyDelivery`."""

    async def note(self, **fields: Any) -> None:
        """`await delivery.note(...)`: `dedup.Delivery.note`, awaited (one fenced write of the
        record's `notes`, lease mode only; `LeaseLost` once the lease is not this delivery's)."""
        await self._notes_of_run().note(fields)

    async def step(
        self,
        name: str,
        fn: Callable[..., Awaitable[Any]],
        /,
        *args: Any,
        transactional: bool = False,
        on_interrupted: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """`await delivery.step(name, fn, ...)`: `dedup.Delivery.step` with an `async def` `fn`
        (awaited; a transactional one gets the `AsyncTransaction`)."""
        notes = self._notes_of_run()
        return await notes.run_step(name, fn, args, kwargs, transactional, on_interrupted, True)


@dataclass(frozen=True)
class AsyncTransactionDelivery(AsyncDelivery):
    """The delivery a transaction-mode async handler gets: `transaction` is always set."""

    transaction: AsyncTransaction = field(kw_only=True)
    """The transaction the handler reads (awaited) and writes through."""


@dataclass(frozen=True)
class AsyncWriteOnlyDelivery(AsyncDelivery):
    """The delivery a write-only-mode async handler gets: `batch` is always set."""

    batch: AsyncWriteBatch = field(kw_only=True)
    """The batch the handler adds writes to; it commits with the marker's create."""


ASYNC_DELIVERIES: DeliveryKinds = (AsyncDelivery, AsyncTransactionDelivery, AsyncWriteOnlyDelivery)
"""What async handlers get, by mode (lease, transaction, write-only)."""

AsyncHandler = Callable[[AsyncDelivery], Awaitable[HandlerResult]]
"""An async handler: `async def handler(delivery) -> None | result map`."""
