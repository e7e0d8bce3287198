"""A bounded, thread-safe LRU of keys known to be finished, so a repeated duplicate costs no RPC.

Only final records (sent, failed, dead) are cached: they never change back, so a cached answer
cannot be wrong, only evicted. The cache is per instance and lost on a cold start.
"""

from __future__ import annotations

import threading
from collections import OrderedDict


class FinishedKeys:
    """LRU set of finished keys (with their payload fingerprint), holding at most `capacity`."""

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
        """(True, payload hash) if `key` is known finished, refreshing its recency; else (False, None)."""
        with self._lock:
            if key not in self._entries:
                return False, None
            self._entries.move_to_end(key)
            return True, self._entries[key]

    def add(self, key: str, payload_hash: str | None) -> None:
        """Remember `key` as finished, evicting the least recently used key beyond capacity."""
        if self._capacity <= 0:
            return
        with self._lock:
            self._entries[key] = payload_hash
            self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)
