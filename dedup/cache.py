"""Per-instance memory: an LRU of sent keys, and per-key turns for concurrent deliveries.

`SentKeys`: only records known sent are cached. Nothing turns a sent record back (an operator
may revive failed and dead ones, which is why those are not cached), so a cached answer cannot
be wrong, only evicted. Lost on a cold start.

`KeyTurns`: deliveries of one key on one instance take turns. Firestore transactions take
read locks, so N transactions that read the same record deadlock until the database aborts
all but one (the emulator after a 2 s lock timeout): letting one go first turns the rest into
cheap duplicates. An optimization only; correctness never depends on it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager


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


class KeyTurns:
    """Mutual exclusion per key within one process; holds no memory for idle keys."""

    def __init__(self) -> None:
        """No key is busy."""
        self._lock = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextmanager
    def turn(self, key: str) -> Iterator[None]:
        """Wait until no other thread of this process is inside `turn(key)`, then enter."""
        with self._lock:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
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
