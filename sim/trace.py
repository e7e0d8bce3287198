"""A run's trace: who awaited what, what the store answered, which fault struck, in virtual
time. Recorded cheaply on every run (a tuple a line, formatted only when printed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Trace:
    """The lines of one run, formatted on demand (`render`)."""

    def __init__(self, detail: bool = False) -> None:
        self.detail = detail
        self.lines: list[tuple[float, str, str, str | Callable[..., str], tuple[Any, ...]]] = []

    def add(
        self, t: float, who: str, verb: str, what: str | Callable[..., str], *args: Any
    ) -> None:
        """One line: at virtual time `t`, `who` (a delivery, an instance, the server) `verb`
        `what` (a format string for `args`, or a function of them)."""
        self.lines.append((t, who, verb, what, args))

    def render(self, limit: int | None = None) -> list[str]:
        """The lines as text, `limit` last ones at most."""
        shown = self.lines if limit is None else self.lines[-limit:]
        out = []
        for t, who, verb, what, args in shown:
            text = what(*args) if callable(what) else what.format(*args) if args else what
            out.append(f"{t:10.4f}  {who:<14} {verb:<8} {text}")
        return out
