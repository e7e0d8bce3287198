"""Which handler owns each suffix (`SuffixRegistry`), and the process-wide registry every
decorator uses by default (`DEFAULT_REGISTRY`)."""

from __future__ import annotations

import threading

from dedup.errors import DuplicateSuffix


class SuffixRegistry:
    """Which handler owns each suffix; a second registration of a suffix fails.

    One process-wide registry (`DEFAULT_REGISTRY`) backs `trigger_once`; tests pass their own
    instance to stay isolated. Thread-safe.
    """

    def __init__(self) -> None:
        """An empty registry."""
        self._owners: dict[str, str] = {}
        self._lock = threading.Lock()

    def register(self, suffix: str, owner: str) -> None:
        """Record `owner` (module.qualname) for `suffix`; raise `DuplicateSuffix` if taken."""
        with self._lock:
            existing = self._owners.get(suffix)
            if existing is not None:
                raise DuplicateSuffix(
                    f"suffix {suffix!r} is used by both {existing} and {owner}: two functions "
                    "sharing a suffix would skip each other's events; give each its own suffix"
                )
            self._owners[suffix] = owner

    def owner(self, suffix: str) -> str | None:
        """The handler registered for `suffix`, if any."""
        with self._lock:
            return self._owners.get(suffix)


DEFAULT_REGISTRY = SuffixRegistry()
"""The process-wide suffix registry used when `trigger_once` gets no `registry`."""
