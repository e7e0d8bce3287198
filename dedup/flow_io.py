"""The seam between the flows and the outside world: `FlowIO`, and `drive` for the sync path.

The flows (`dedup.lease`, `dedup.atomic`) are written once, as coroutines that await every
Firestore call, pause, per-key turn and handler call through a `FlowIO`. Two implementations
do the I/O and nothing else:

| implementation              | client                          | awaited how                   |
|-----------------------------|---------------------------------|-------------------------------|
| `dedup.blocking.BlockingIO` | `firestore.Client` (sync)       | `drive`: never suspends       |
| `dedup.aio.store.AsyncRecordStore` | `firestore.AsyncClient`  | the caller's event loop       |

`BlockingIO`'s methods are `async def` but block inside and never await anything that
suspends, so `drive` runs a flow to its end in one `send`, on the caller's thread, without an
event loop: the sync path gains no thread and no loop, and the claim decisions, record
transitions and retry rules exist once for both.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, cast

from dedup.errors import StoreUnavailable
from dedup.store import Conflict, Snapshot
from dedup.transitions import Fields

if TYPE_CHECKING:
    from dedup.delivery import HandlerResult
    from dedup.runs import Run

Invoke = Callable[[Any], Coroutine[Any, Any, object]]
"""`await invoke(writer)`: call the handler with its delivery at the run's current attempt and
return what it returned. `writer`: None in lease mode, the transaction or the batch otherwise."""

Fill = Callable[[Any], Coroutine[Any, Any, "HandlerResult"]]
"""`await fill(writer)`: run the handler into a transaction or batch and add the marker."""


class FlowIO(Protocol):
    """Everything a flow does outside itself. Store methods behave as `dedup.store.RecordStore`'s
    (bounded in time, `Conflict` values, `StoreUnavailable` chaining the cause)."""

    def path(self, key: str) -> str:
        """The record's document path, `<collection>/<key>`."""
        ...

    async def read(self, key: str, *, action: str = "claim") -> Snapshot:
        """Read the record (see `RecordStore.read`)."""
        ...

    async def create(
        self, key: str, fields: Fields, *, action: str = "claim", budget: float | None = None
    ) -> datetime | Conflict:
        """Create the record if absent (see `RecordStore.create`)."""
        ...

    async def update_if_unchanged(
        self,
        key: str,
        fields: Fields,
        update_time: datetime,
        *,
        action: str,
        budget: float | None = None,
    ) -> datetime | Conflict:
        """Update the record if last written at `update_time` (see `RecordStore`)."""
        ...

    def unavailable(self, action: str, key: str, exc: BaseException | None) -> StoreUnavailable:
        """The error for a failed `action` on the record (chain `exc` with `from`)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Pause this delivery (a backoff)."""
        ...

    def turn(self, key: str) -> AbstractAsyncContextManager[None]:
        """Wait until no other delivery of `key` on this instance is inside its turn."""
        ...

    def ref(self, key: str) -> Any:
        """The record's document reference, of this client's kind."""
        ...

    async def commit(self, run: Run, fill: Fill) -> HandlerResult:
        """Open a transaction (Mode.TRANSACTION) or batch (Mode.WRITE_ONLY), `fill` it, commit
        it once (no retry: a lost response is resolved by reading); a transaction is retried by
        the client on Aborted. Raises what `fill` or the commit raised."""
        ...


def drive[T](flow: Coroutine[Any, Any, T]) -> T:
    """Run a flow over `BlockingIO` to its end on this thread (it never suspends)."""
    try:
        flow.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    flow.close()
    raise RuntimeError(
        "a dedup flow suspended under the blocking driver: it awaited something that is not "
        "BlockingIO; run async handlers through dedup.aio.AsyncDeduplicator"
    )
