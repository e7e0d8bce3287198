"""`BlockingIO`: the sync `FlowIO` (`dedup.flow_io`), over a `RecordStore` and `KeyTurns`.

Its methods are coroutines only in name: each blocks on the sync Firestore client (or lock,
or `time.sleep`) and returns without suspending, so `drive` runs a flow on the caller's thread
as plain sync code. No Firestore logic lives here: the store's calls are `RecordStore`'s.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, cast

from google.cloud import firestore

from dedup.atomic import TRANSACTION_ATTEMPTS
from dedup.cache import KeyTurns
from dedup.delivery import Handler, HandlerResult
from dedup.errors import StoreUnavailable
from dedup.flow_io import Fill, Invoke, drive
from dedup.record import Mode
from dedup.store import Conflict, RecordStore, Snapshot
from dedup.transitions import Fields

if TYPE_CHECKING:
    from dedup.runs import Run


class BlockingIO:
    """The sync path's I/O: `RecordStore` calls, `KeyTurns`, `time.sleep`, one thread."""

    def __init__(self, store: RecordStore, turns: KeyTurns) -> None:
        """Do the flows' I/O through `store`, taking per-key turns in `turns`."""
        self.store = store
        self.turns = turns

    def path(self, key: str) -> str:
        """The record's document path."""
        return self.store.path(key)

    def ref(self, key: str) -> firestore.DocumentReference:
        """The record's document reference."""
        return self.store.ref(key)

    async def read(self, key: str, *, action: str = "claim") -> Snapshot:
        """`RecordStore.read`."""
        return self.store.read(key, action=action)

    async def create(
        self, key: str, fields: Fields, *, action: str = "claim", budget: float | None = None
    ) -> datetime | Conflict:
        """`RecordStore.create`."""
        return self.store.create(key, fields, action=action, budget=budget)

    async def update_if_unchanged(
        self,
        key: str,
        fields: Fields,
        update_time: datetime,
        *,
        action: str,
        budget: float | None = None,
    ) -> datetime | Conflict:
        """`RecordStore.update_if_unchanged`."""
        return self.store.update_if_unchanged(
            key, fields, update_time, action=action, budget=budget
        )

    def unavailable(self, action: str, key: str, exc: BaseException | None) -> StoreUnavailable:
        """`RecordStore.unavailable`."""
        return self.store.unavailable(action, key, exc)

    async def sleep(self, seconds: float) -> None:
        """Block this thread for `seconds`."""
        time.sleep(seconds)

    @asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        """This thread's turn for `key` (`KeyTurns.turn`)."""
        with self.turns.turn(key):
            yield

    async def commit(self, run: Run, fill: Fill) -> HandlerResult:
        """`FlowIO.commit` with a `WriteBatch`, or a `BoundedTransaction` run by
        `firestore.transactional`."""
        client = self.store.client
        timeout = run.config.rpc_timeout_seconds
        if run.mode is Mode.WRITE_ONLY:
            batch = client.batch()
            result = drive(fill(batch))
            batch.commit(retry=None, timeout=timeout)
            return result

        def body(transaction: firestore.Transaction) -> HandlerResult:
            return drive(fill(transaction))

        transaction = self.store.transaction(max_attempts=TRANSACTION_ATTEMPTS)
        return cast(HandlerResult, firestore.transactional(body)(transaction))

    def invoker(self, run: Run, handler: Handler) -> Invoke:
        """How the flows call a sync `handler`: with `Run.delivery` on this client."""
        client = self.store.client

        async def invoke(writer: object) -> object:
            return handler(run.delivery(client, writer))

        return invoke
