"""`BlockingIO`: the sync `FlowIO` (`dedup.flow_io`), over a `RecordStore` and `KeyTurns`.

Its methods are coroutines only in name: each blocks on the sync Firestore client (or lock,
or `time.sleep`) and returns without suspending, so `drive` runs a flow on the caller's thread
as plain sync code. No Firestore logic lives here: the store's calls are `RecordStore`'s.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, cast

from google.cloud import firestore

from dedup.atomic import TRANSACTION_ATTEMPTS
from dedup.cache import KeyTurns
from dedup.delivery import Handler, HandlerResult
from dedup.flow_io import Fill, Invoke, drive
from dedup.record import Mode
from dedup.store import RecordStore

if TYPE_CHECKING:
    from dedup.runs import Run


def _blocking[**P, R](call: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """`call` as a coroutine function that never suspends (what `drive` needs)."""

    async def blocking(*args: P.args, **kwargs: P.kwargs) -> R:
        return call(*args, **kwargs)

    return blocking


class BlockingIO:
    """The sync path's I/O: `RecordStore` calls (`read`, `create`, `update_if_unchanged`,
    `path`, `ref`, `unavailable`: the store's own, awaitable), `KeyTurns`, `time.sleep`."""

    def __init__(self, store: RecordStore, turns: KeyTurns) -> None:
        """Do the flows' I/O through `store`, taking per-key turns in `turns`."""
        self.store = store
        self.turns = turns
        self.path = store.path
        self.ref = store.ref
        self.unavailable = store.unavailable
        self.read = _blocking(store.read)
        self.create = _blocking(store.create)
        self.update_if_unchanged = _blocking(store.update_if_unchanged)

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
