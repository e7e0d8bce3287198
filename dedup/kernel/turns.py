"""An instance's per-key turns (`KeyTurns`): one delivery of a key at a time inside one
process, for the store's `turn` (`dedup.kernel.store.RecordStore.turn`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, cast


class TurnTimeout(TimeoutError):
    """A delivery's time budget ran out while it waited for its turn on a key (`KeyTurns`)."""


class KeyTurns:
    """Mutual exclusion per key within one process; holds no memory for idle keys. `turn`
    serves threads; `lock_of` a per-key lock of another kind (the async path's)."""

    def __init__(self) -> None:
        """No key is busy."""
        self._lock = threading.Lock()
        self._locks: dict[str, tuple[Any, int]] = {}

    def turn(self, key: str, timeout: float | None = None) -> _Turn:
        """Wait until no other thread of this process is inside `turn(key)`, then enter (`with`,
        or `async with` from a flow, blocking); `TurnTimeout` after `timeout` seconds (None:
        wait as long as it takes)."""
        return _Turn(self, key, timeout)

    def lock_of[L](self, key: str, new: Callable[[], L]) -> AbstractContextManager[L]:
        """The lock every user of `key` shares (made by `new` for the first), kept while any
        user is inside this block; the caller acquires it."""
        return _Shared(self, key, new)

    def _join[L](self, key: str, new: Callable[[], L]) -> L:
        with self._lock:
            lock, users = self._locks.get(key, (None, 0))
            if lock is None:
                lock = new()
            self._locks[key] = (lock, users + 1)
        return cast(L, lock)

    def _leave(self, key: str) -> None:
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


class _Shared[L]:
    """`KeyTurns.lock_of`'s block."""

    __slots__ = ("_key", "_new", "_turns")

    def __init__(self, turns: KeyTurns, key: str, new: Callable[[], L]) -> None:
        self._turns, self._key, self._new = turns, key, new

    def __enter__(self) -> L:
        return self._turns._join(self._key, self._new)

    def __exit__(self, *exc_info: object) -> None:
        self._turns._leave(self._key)


class _Turn:
    """`KeyTurns.turn`'s block."""

    __slots__ = ("_key", "_lock", "_timeout", "_turns")

    def __init__(self, turns: KeyTurns, key: str, timeout: float | None) -> None:
        self._turns, self._key, self._timeout = turns, key, timeout

    def __enter__(self) -> None:
        turns, key, timeout = self._turns, self._key, self._timeout
        lock = self._lock = turns._join(key, threading.Lock)
        try:
            wait = -1.0 if timeout is None else max(0.001, timeout)
            if not lock.acquire(timeout=wait):
                raise TurnTimeout(f"no turn on {key} within {timeout:.1f} s")
        except BaseException:
            turns._leave(key)
            raise

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._lock.release()
        finally:
            self._turns._leave(self._key)

    async def __aenter__(self) -> None:  # a flow's `async with`, blocking: it never suspends
        self.__enter__()

    async def __aexit__(self, *exc_info: object) -> None:
        self.__exit__()
