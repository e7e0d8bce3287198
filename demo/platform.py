"""An at-least-once platform in miniature: deliver each event several times, concurrently, and
retry every delivery that failed, as Eventarc does with retries on.

Each copy is its own delivery: one that answers 2xx is done; anything else (a released lease
re-raised, `LeaseHeld` while another copy runs, a receiver's 503) is retried after a short
backoff until it answers 2xx or the retry budget is spent.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from demo.events import HttpEvent

COPIES = 4
"""How many times each event is delivered at once (the platform's duplicates)."""
MAX_RETRIES = 30
BACKOFF_SECONDS = 0.2


class Endpoint(Protocol):
    """Where events are delivered: a function served on its own (`demo.serve`), or a trigger
    route of the Functions emulator (`demo.emulator_triggers`)."""

    def deliver(self, event: HttpEvent) -> int:
        """POST the event once; the HTTP status (2xx: done)."""
        ...


@dataclass
class DeliveryLog:
    """What the platform did for one function: events, deliveries, answers."""

    events: int = 0
    deliveries: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    undelivered: list[str] = field(default_factory=list)


def _deliver_until_done(function: Endpoint, event: HttpEvent) -> list[int]:
    """One copy of the event: delivered, and retried with backoff until it gets a 2xx."""
    statuses = [function.deliver(event)]
    while not 200 <= statuses[-1] < 300 and len(statuses) <= MAX_RETRIES:
        time.sleep(BACKOFF_SECONDS * min(len(statuses), 5))
        statuses.append(function.deliver(event))
    return statuses


def deliver_at_least_once(
    function: Endpoint, event: HttpEvent, log: DeliveryLog, copies: int = COPIES
) -> None:
    """Deliver `event` `copies` times at once; retry each failed copy until it succeeds."""
    log.events += 1
    with ThreadPoolExecutor(max_workers=copies) as pool:
        per_copy = list(pool.map(lambda _: _deliver_until_done(function, event), range(copies)))
    for statuses in per_copy:
        log.deliveries += len(statuses)
        log.statuses.update(statuses)
        if not 200 <= statuses[-1] < 300:
            log.undelivered.append(event.description)
