"""`AsyncRecordStore`: the async `FlowIO` (`dedup.flow_io`) over a `firestore.AsyncClient`.

I/O only, the async twin of `dedup.store.RecordStore` (plus the pacing that
`dedup.delivery.BlockingIO` adds to it): the same record operations, method for method
(`read`, `create`, `update_if_unchanged`, `commit_batch`, `run_transaction`), bounded the same
way (`ConditionalTries`, `transient_retry`, and `BoundedAsyncTransaction` from
`dedup.firestore_internals`), awaited on the caller's event loop. Per-key turns wait on an
`asyncio.Lock` (the table is `dedup.delivery.KeyTurns`'s), pauses are `asyncio.sleep`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from google.api_core.retry import AsyncRetry
from google.cloud import firestore
from google.cloud.firestore import AsyncClient, AsyncDocumentReference, AsyncTransaction

from dedup.delivery import TurnTimeout
from dedup.firestore_internals import BoundedAsyncTransaction
from dedup.store import (
    ROLLBACK_FLOOR_SECONDS,
    ConditionalTries,
    Conflict,
    Snapshot,
    StoreBase,
    add_marker,
    snapshot_of,
    transient_retry,
    written_time,
)

if TYPE_CHECKING:
    from dedup.delivery import KeyTurns
    from dedup.flow_io import Fill
    from dedup.record import Fields


class AsyncRecordStore(StoreBase[AsyncClient]):
    """The dedup collection of one `AsyncClient`, and everything else a flow awaits; use it
    from the event loop the client was created on."""

    def __init__(
        self,
        client: AsyncClient,
        collection: str,
        *,
        turns: KeyTurns,
        rpc_timeout_seconds: float = 10,
    ) -> None:
        """Operate on `collection` through `client`, deliveries of one key taking turns in
        `turns`; each call gives up after `rpc_timeout_seconds`."""
        super().__init__(client, collection, rpc_timeout_seconds=rpc_timeout_seconds)
        self.turns = turns

    def ref(self, key: str) -> AsyncDocumentReference:
        """Reference to the record's document."""
        return self.client.collection(self.collection).document(key)

    async def read(
        self, key: str, *, action: str = "claim", budget: float | None = None
    ) -> Snapshot:
        """Read the record, retrying transient errors within the RPC timeout (or `budget`)."""
        timeout = self.timeout_within(budget)
        retry = transient_retry(timeout, AsyncRetry)
        with self.wrapped(action, key):
            document = await self.ref(key).get(retry=retry, timeout=timeout)
        return snapshot_of(document)

    async def create(
        self, key: str, fields: Fields, *, action: str = "claim", budget: float | None = None
    ) -> datetime | Conflict:
        """Create the record if absent: its update time, or a `Conflict` (see `RecordStore`)."""
        ref = self.ref(key)
        return await self._conditional(
            action, key, lambda timeout: ref.create(fields, retry=None, timeout=timeout), budget
        )

    async def update_if_unchanged(
        self,
        key: str,
        fields: Fields,
        update_time: datetime,
        *,
        action: str,
        budget: float | None = None,
    ) -> datetime | Conflict:
        """Update the record only if it was last written at `update_time` (see `RecordStore`)."""
        ref = self.ref(key)
        option = self.client.write_option(last_update_time=update_time)
        return await self._conditional(
            action,
            key,
            lambda timeout: ref.update(fields, option=option, retry=None, timeout=timeout),
            budget,
        )

    async def sleep(self, seconds: float) -> None:
        """Pause this delivery, not the event loop."""
        await asyncio.sleep(seconds)

    @asynccontextmanager
    async def turn(self, key: str, timeout: float | None = None) -> AsyncIterator[None]:
        """This task's turn for `key` among the instance's deliveries on this event loop;
        `TurnTimeout` after `timeout` seconds (None: no limit)."""
        with self.turns.lock_of(key, asyncio.Lock) as lock:
            try:
                await asyncio.wait_for(lock.acquire(), timeout)
            except TimeoutError:
                raise TurnTimeout(f"no turn on {key} within {timeout:.1f} s") from None
            try:
                yield
            finally:
                lock.release()

    async def commit_batch(
        self, key: str, fill: Fill, guard: datetime | None, *, budget: float | None = None
    ) -> Any:
        """Fill an `AsyncWriteBatch`, add the marker (`dedup.store.add_marker`) and commit it
        once; see `RecordStore.commit_batch`."""
        ends = None if budget is None else time.monotonic() + budget
        batch = self.client.batch()
        result, fields = await fill(batch)
        add_marker(batch, self.ref(key), fields, guard, "write_only")
        left = None if ends is None else ends - time.monotonic()
        await batch.commit(retry=None, timeout=self.timeout_within(left))
        return result

    async def run_transaction(
        self,
        key: str,
        fill: Fill,
        guard: datetime | None,
        *,
        attempts: int,
        budget: float | None = None,
    ) -> Any:
        """Fill a `BoundedAsyncTransaction`, add the marker and commit it, run by
        `firestore.async_transactional`; see `RecordStore.run_transaction`."""
        ref = self.ref(key)

        async def body(transaction: AsyncTransaction) -> Any:
            result, fields = await fill(transaction)
            add_marker(transaction, ref, fields, guard, "transaction")
            return result

        timeout = self.timeout_within(budget)
        transaction = BoundedAsyncTransaction(
            self.client,
            max_attempts=attempts,
            timeout=self.shrinking(budget),
            rollback_timeout=self.shrinking(budget, floor=ROLLBACK_FLOOR_SECONDS),
            begin_retry=transient_retry(timeout, AsyncRetry),
        )
        return await firestore.async_transactional(body)(transaction)

    async def _conditional(
        self, action: str, key: str, write: Any, budget: float | None
    ) -> datetime | Conflict:
        tries = ConditionalTries(self, action, key, budget)
        while True:
            try:
                return written_time(await write(tries.timeout()))
            except Exception as exc:
                pause = tries.after(exc)
            if isinstance(pause, Conflict):
                return pause
            await asyncio.sleep(pause)
