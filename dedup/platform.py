"""Platform facts the code depends on, each with the page of docs/platform.md that sources it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class RedeliveryWindow:
    """How long the platform may deliver an event again after its first delivery."""

    span: timedelta
    """The window's length."""
    triggers: str
    """The triggers it applies to, as the operator reads them."""
    source: str
    """Where the fact is stated, with its references."""

    def describe(self) -> str:
        """`24 hours for 2nd gen event functions and Eventarc (docs/platform.md)`."""
        hours = int(self.span.total_seconds()) // 3600
        return f"{hours} hours for {self.triggers} ({self.source})"


REDELIVERY_WINDOWS = (
    RedeliveryWindow(
        span=timedelta(hours=24),
        triggers="2nd gen event functions and Eventarc",
        source="docs/platform.md",
    ),
)
"""The redelivery windows of the triggers whose records this template keeps. Its functions are
2nd gen: Firestore and Pub/Sub triggers are delivered by Eventarc (24 hours); HTTP and callable
functions are retried by their clients and task-queue functions by their queue's retry config,
both well inside that (docs/tasks.md: about 30 minutes)."""

LONGEST_REDELIVERY_WINDOW = max(REDELIVERY_WINDOWS, key=lambda window: window.span)
"""The window a record must outlive: a redelivery that finds no record runs the handler again."""
