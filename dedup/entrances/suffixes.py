"""Which function owns each suffix: `SuffixRegistry`, and the process-wide `DEFAULT_REGISTRY`
the decorators register in at import. Nothing here runs on a delivery."""

from __future__ import annotations

import inspect
import threading
from typing import NamedTuple

from dedup.errors import DuplicateSuffix


class SuffixRegistry:
    """Which handler owns each suffix; a second registration of a suffix fails, unless it is
    the same function declared again by a second import of its module.

    A function registered with its `handler` is known by its name (`owner`, module.qualname)
    and where it is defined (file, first line). A module imported twice in one process (two
    `functions_framework.create_app` calls on one main.py) compiles its functions again: the
    same name at the same place, another code object; that declaration takes its suffix back.
    Two different functions sharing a suffix are refused naming both (apart by file and line
    when their names are the same), and so is one definition decorated twice (each decoration
    is a function of its own). One process-wide registry (`DEFAULT_REGISTRY`) backs
    `trigger_once`; tests pass their own instance to stay isolated. Thread-safe.
    """

    def __init__(self) -> None:
        """An empty registry."""
        self._owners: dict[str, _Declared] = {}
        self._lock = threading.Lock()

    def register(self, suffix: str, owner: str, *, handler: object = None) -> None:
        """Record `owner` (module.qualname of `handler`, when given) for `suffix`; raise
        `DuplicateSuffix` if another function holds it (see the class)."""
        declared = _Declared.of(owner, handler)
        with self._lock:
            existing = self._owners.get(suffix)
            if existing is not None and not declared.again(existing):
                raise DuplicateSuffix(_clash(suffix, existing, declared))
            self._owners[suffix] = declared

    def owner(self, suffix: str) -> str | None:
        """The handler registered for `suffix`, if any."""
        with self._lock:
            found = self._owners.get(suffix)
            return None if found is None else found.owner


class _Declared(NamedTuple):
    """One registration: the function's name, where it is defined, its code."""

    owner: str
    origin: tuple[str, int] | None
    code: object

    @classmethod
    def of(cls, owner: str, handler: object) -> _Declared:
        unwrapped = inspect.unwrap(handler) if callable(handler) else handler
        code = getattr(unwrapped, "__code__", None)
        origin = None if code is None else (code.co_filename, code.co_firstlineno)
        return cls(owner, origin, code)

    def again(self, earlier: _Declared) -> bool:
        """This is `earlier`'s function declared again by a new import of its module."""
        same_place = (self.owner, self.origin) == (earlier.owner, earlier.origin)
        return same_place and (self.code is None or self.code is not earlier.code)

    def located(self) -> str:
        if self.origin is None:
            return self.owner
        return f"{self.owner} ({self.origin[0]}, line {self.origin[1]})"


def _clash(suffix: str, first: _Declared, second: _Declared) -> str:
    """What `DuplicateSuffix` says: both functions, each named once and told apart."""
    why = "two functions sharing a suffix would skip each other's events"
    if first.owner != second.owner:
        first_name, second_name = first.owner, second.owner
    elif first.origin != second.origin:
        first_name, second_name = first.located(), second.located()
    else:
        return (
            f"suffix {suffix!r} is given twice to {first.located()}: each decoration makes a "
            f"function of its own, and {why}; decorate it once, or give each its own suffix"
        )
    return (
        f"suffix {suffix!r} is used by both {first_name} and {second_name}: {why}; give each "
        "its own suffix"
    )


DEFAULT_REGISTRY = SuffixRegistry()
"""The process-wide suffix registry used when `trigger_once` gets no `registry`."""
