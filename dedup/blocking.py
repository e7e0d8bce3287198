"""`BlockingIO`: the sync `FlowIO` (`dedup.flow_io`), over a sync store (`Records`) and
`KeyTurns`.

Its methods are coroutines only in name: each blocks on the sync store (or lock, or
`time.sleep`) and returns without suspending, so `drive` runs a flow on the caller's thread as
plain sync code. No store logic lives here: the record operations are the store's own
(`dedup.store.RecordStore`, or the tests' in-memory `MemoryStore`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from dedup.cache import KeyTurns
from dedup.flow_io import Fill, Records, drive
from dedup.transitions import Fields


def _blocking[**P, R](call: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """`call` as a coroutine function that never suspends (what `drive` needs)."""

    async def blocking(*args: P.args, **kwargs: P.kwargs) -> R:
        return call(*args, **kwargs)

    return blocking


class BlockingIO:
    """The sync path's I/O: a `Records` store's operations (awaitable, never suspending),
    `KeyTurns`, `time.sleep`."""

    def __init__(self, store: Records, turns: KeyTurns) -> None:
        """Do the flows' I/O through `store`, taking per-key turns in `turns`."""
        self.store = store
        self.turns = turns
        self.client = store.client
        self.path = store.path
        self.unavailable = store.unavailable
        self.read = _blocking(store.read)
        self.create = _blocking(store.create)
        self.update_if_unchanged = _blocking(store.update_if_unchanged)

    async def commit_batch(self, key: str, fill: Fill, guard: datetime | None) -> Any:
        """The store's `commit_batch`, `fill` driven on this thread."""
        return self.store.commit_batch(key, _driven(fill), guard)

    async def run_transaction(
        self, key: str, fill: Fill, guard: datetime | None, *, attempts: int
    ) -> Any:
        """The store's `run_transaction`, `fill` driven on this thread."""
        return self.store.run_transaction(key, _driven(fill), guard, attempts=attempts)

    async def sleep(self, seconds: float) -> None:
        """Block this thread for `seconds`."""
        time.sleep(seconds)

    @asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        """This thread's turn for `key` (`KeyTurns.turn`)."""
        with self.turns.turn(key):
            yield


def _driven(fill: Fill) -> Callable[[Any], tuple[Any, Fields]]:
    def driven(writer: Any) -> tuple[Any, Fields]:
        return drive(fill(writer))

    return driven
