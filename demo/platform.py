"""An at-least-once platform in miniature: deliver each event several times, concurrently, and
retry every delivery that failed, as Eventarc does with retries on.

A delivery that answers 2xx is done. Anything else (a released lease re-raised, `LeaseHeld`
while another copy runs, a receiver's 503) is retried after a short backoff, until one copy
succeeds or the retry budget is spent.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from demo.events import HttpEvent
from demo.serve import ServedFunction

COPIES = 4
"""How many times each event is delivered at once (the platform's duplicates)."""
MAX_RETRIES = 30
BACKOFF_SECONDS = 0.2


@dataclass
class DeliveryLog:
    """What the platform did for one function: events, deliveries, answers."""

    events: int = 0
    deliveries: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    undelivered: list[str] = field(default_factory=list)


def deliver_at_least_once(
    function: ServedFunction, event: HttpEvent, log: DeliveryLog, copies: int = COPIES
) -> None:
    """Deliver `event` `copies` times at once, then retry until one delivery succeeds."""
    log.events += 1
    with ThreadPoolExecutor(max_workers=copies) as pool:
        statuses = list(pool.map(lambda _: function.deliver(event), range(copies)))
    log.deliveries += copies
    log.statuses.update(statuses)
    succeeded = any(200 <= s < 300 for s in statuses)
    retries = 0
    while not succeeded and retries < MAX_RETRIES:
        time.sleep(BACKOFF_SECONDS * min(retries + 1, 5))
        status = function.deliver(event)
        log.deliveries += 1
        log.statuses[status] += 1
        succeeded = 200 <= status < 300
        retries += 1
    if not succeeded:
        log.undelivered.append(event.description)
