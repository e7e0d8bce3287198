"""An instance's per-key turns (`KeyTurns`): one delivery of a key at a time inside one
process, for the store's `turn` (`dedup.kernel.store.RecordStore.turn`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast


class TurnTimeout(TimeoutError):
    """A delivery's time budget ran out while it waited for its turn on a key (`KeyTurns`)."""


class KeyTurns:
    """Mutual exclusion per key within one process; holds no memory for idle keys.

    `turn` serves threads; `lock_of` gives the per-key lock of another kind to wait on (the
    async path's `asyncio.Lock`, `dedup.kernel.store.RecordStore.turn`)."""

    def __init__(self) -> None:
        """No key is busy."""
        self._lock = threading.Lock()
        self._locks: dict[str, tuple[Any, int]] = {}

    @contextmanager
    def turn(self, key: str, timeout: float | None = None) -> Iterator[None]:
        """Wait until no other thread of this process is inside `turn(key)`, then enter;
        `TurnTimeout` after `timeout` seconds (None: wait as long as it takes)."""
        with self.lock_of(key, threading.Lock) as lock:
            wait = -1.0 if timeout is None else max(0.001, timeout)
            if not lock.acquire(timeout=wait):
                raise TurnTimeout(f"no turn on {key} within {timeout:.1f} s")
            try:
                yield
            finally:
                lock.release()

    @contextmanager
    def lock_of[L](self, key: str, new: Callable[[], L]) -> Iterator[L]:
        """The lock every user of `key` shares (made by `new` for the first), kept while any
        user is inside this block; the caller acquires it."""
        with self._lock:
            lock, users = self._locks.get(key, (None, 0))
            if lock is None:
                lock = new()
            self._locks[key] = (lock, users + 1)
        try:
            yield cast(L, lock)
        finally:
            with self._lock:
                lock, users = self._locks[key]
                if users <= 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        """Number of keys with a delivery inside or waiting."""
        with self._lock:
            return len(self._locks)
