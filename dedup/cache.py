"""Per-instance memory: an LRU of sent keys, and per-key turns for concurrent deliveries.

`SentKeys`: only records known sent are cached. Nothing turns a sent record back (an operator
may revive failed and dead ones, which is why those are not cached), so a cached answer cannot
be wrong, only evicted. Lost on a cold start.

`LiveLeases`: keys whose lease this instance knows to be live, so that a copy of the event
arriving meanwhile answers `LeaseHeld` without a round trip: while this process runs the
handler itself (until it records the outcome), or, for at most `LIVE_LEASE_HORIZON_SECONDS`,
after a read showed another delivery's live lease. Fifty copies of one event then cost one
write and a few reads instead of fifty contending writes. It only ever answers "retry later",
never "done", so it cannot lose an effect; the horizon bounds how long it can delay one.

`KeyTurns`: deliveries of one key on one instance take turns (lease mode for its claim only,
the atomic modes for their whole commit). Concurrent writes with preconditions on one
document contend for its lock (the emulator answers "Transaction lock timeout" after 2 s
under load): letting one go first turns the rest into cheap duplicates or `LeaseHeld`
answers. An optimization only; correctness never depends on it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast


class SentKeys:
    """LRU set of sent keys (with their payload fingerprint), holding at most `capacity`."""

    def __init__(self, capacity: int) -> None:
        """An empty cache; `capacity` 0 disables it (nothing is ever remembered)."""
        self._capacity = capacity
        self._entries: OrderedDict[str, str | None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Number of keys currently held (never more than the capacity)."""
        with self._lock:
            return len(self._entries)

    def __contains__(self, key: object) -> bool:
        """Membership test that does not refresh the key's recency."""
        with self._lock:
            return key in self._entries

    def lookup(self, key: str) -> tuple[bool, str | None]:
        """(True, payload hash) if `key` is known sent (refreshing it), else (False, None)."""
        with self._lock:
            if key not in self._entries:
                return False, None
            self._entries.move_to_end(key)
            return True, self._entries[key]

    def add(self, key: str, payload_hash: str | None) -> None:
        """Remember `key` as sent, evicting the least recently used key beyond capacity."""
        if self._capacity <= 0:
            return
        with self._lock:
            self._entries[key] = payload_hash
            self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)


LIVE_LEASE_HORIZON_SECONDS = 1.0
"""How long a live lease seen in a read is trusted without reading again."""


class LiveLeases:
    """Keys with a lease known live on this instance, each until a local monotonic deadline."""

    def __init__(self, horizon_seconds: float = LIVE_LEASE_HORIZON_SECONDS) -> None:
        """Nothing known; leases seen in reads are trusted for at most `horizon_seconds`."""
        self._horizon = horizon_seconds
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def own(self, key: str, seconds: float) -> None:
        """This process holds the lease of `key` for `seconds` (until `drop`)."""
        self._set(key, seconds)

    def hold(self, key: str, seconds: float) -> None:
        """A read showed another delivery's lease live for `seconds` more (capped)."""
        self._set(key, min(seconds, self._horizon))

    def drop(self, key: str) -> None:
        """Forget `key` (its lease ended here)."""
        with self._lock:
            self._until.pop(key, None)

    def live(self, key: str) -> bool:
        """True while a lease of `key` is known live."""
        with self._lock:
            until = self._until.get(key)
            if until is None:
                return False
            if until <= time.monotonic():
                del self._until[key]
                return False
            return True

    def __len__(self) -> int:
        """Number of keys held (expired ones included until looked up or swept)."""
        with self._lock:
            return len(self._until)

    def _set(self, key: str, seconds: float) -> None:
        now = time.monotonic()
        with self._lock:
            self._until[key] = now + max(0.0, seconds)
            if len(self._until) > 10_000:  # sweep: memory stays bounded by live keys
                self._until = {k: t for k, t in self._until.items() if t > now}


class TurnTimeout(TimeoutError):
    """A delivery waited for its turn on a key (`KeyTurns.turn`) longer than it may: its time
    budget ran out while other deliveries of the key on this instance held the turn."""


class KeyTurns:
    """Mutual exclusion per key within one process; holds no memory for idle keys.

    `turn` serves threads; `lock_of` gives the per-key lock of another kind to wait on (the
    async path's `asyncio.Lock`, `dedup.aio.store`)."""

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
