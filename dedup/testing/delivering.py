"""Deliveries of one event: once, copies at once from as many threads, and until one is
answered 2xx as the platform retries; to a URL or, in-process, to a Flask test client.

`deliver_until_done` keeps two promises. It waits between deliveries as the platform backs off
(a delay doubling from `first_delay`, capped), and it does not give up before the wait has
outlasted a lease (`DeliveryGaveUp.patience`: twice `lease_seconds` plus a second, the lease
of the config it is given, so that a crashed delivery's lease has expired on the database's
clock and the next delivery takes it over). Giving up raises `DeliveryGaveUp`, naming every
status seen: a helper that returned non-2xx answers would let a test pass that never ran the
handler to its end.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dedup.config import DedupConfig
from dedup.testing.event import HttpEvent

__all__ = [
    "DIRECT",
    "DeliveryGaveUp",
    "Target",
    "deliver",
    "deliver_concurrently",
    "deliver_until_done",
    "via_test_client",
]

DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Requests go straight to the server under test, never through an `HTTP_PROXY`."""

Target = str | Callable[[HttpEvent], int]
"""Where a delivery goes: a URL, or a callable that POSTs the event and returns the HTTP
status (`via_test_client(client)` makes one of a Flask test client)."""


def via_test_client(client: Any, path: str = "/") -> Callable[[HttpEvent], int]:
    """A delivery target that POSTs to a Flask test client (for example
    `functions_framework.create_app(target, source, "cloudevent").test_client()`) in this
    process, instead of over the network."""

    def post(event: HttpEvent) -> int:
        return int(client.post(path, data=event.body, headers=dict(event.headers)).status_code)

    return post


def deliver(url: Target, event: HttpEvent, *, timeout: float = 60.0) -> int:
    """POST `event` to `url` (a URL, or a `Target` callable) once, as the platform does; the
    HTTP status of the answer (a refused connection raises `URLError`)."""
    if callable(url):
        return url(event)
    request = urllib.request.Request(url, data=event.body, headers=dict(event.headers))
    try:
        with DIRECT.open(request, timeout=timeout) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as answered:
        answered.read()
        return int(answered.code)


def deliver_concurrently(
    url: Target, event: HttpEvent, copies: int = 6, *, timeout: float = 60.0
) -> list[int]:
    """POST `copies` copies of `event` to `url` at once, from as many threads; their HTTP
    statuses in the order they were started. With `dedup`, one copy runs the effect; the
    others answer 2xx (a duplicate) or a retryable status (the first still runs: the platform
    would redeliver them), never a second effect."""
    with ThreadPoolExecutor(max_workers=copies) as pool:
        return list(pool.map(lambda _: deliver(url, event, timeout=timeout), range(copies)))


FIRST_DELAY = 0.1
"""Seconds `deliver_until_done` waits before its first retry; each wait doubles the last."""


class DeliveryGaveUp(AssertionError):
    """`deliver_until_done` got no 2xx answer within its patience or its `limit` of deliveries.

    `statuses` holds every answer in order. Look at why the function refused (its log): a
    handler that keeps failing, a lease longer than the `lease_seconds` given, or a `limit`
    too small for the lease."""

    def __init__(self, statuses: Sequence[int], waited: float, patience: float, why: str):
        self.statuses = list(statuses)
        """Every status seen, in order."""
        self.waited = waited
        """Seconds waited between deliveries, in all."""
        self.patience = patience
        """Seconds it would have waited at most (a lease twice, plus a second)."""
        counts = ", ".join(f"{s} x{self.statuses.count(s)}" for s in sorted(set(self.statuses)))
        super().__init__(
            f"no 2xx answer after {len(self.statuses)} deliveries over {waited:.1f} s "
            f"({why}); statuses: {counts}; in order: {self.statuses}"
        )


def deliver_until_done(
    url: Target,
    event: HttpEvent,
    *,
    copies: int = 1,
    limit: int = 50,
    timeout: float = 60.0,
    config: DedupConfig | None = None,
    first_delay: float = FIRST_DELAY,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> list[int]:
    """Deliver `copies` copies at once (one by default), then one at a time until one is
    answered 2xx, as the platform retries; every status seen, the 2xx last.

    Between deliveries it waits as the platform backs off: `first_delay` seconds, doubling,
    each wait at most an eighth of its patience. Its patience is `2 * lease_seconds + 1`
    seconds of waiting, `lease_seconds` being the lease of `config` (the function's
    `DedupConfig`, e.g. `deduplicator.config`; default: the `DEDUP_*` settings of this
    process's environment, as a function served in this process reads them): long enough for
    the lease of a delivery that crashed (`crash_at_step`) to expire on the database's clock.
    Raises `DeliveryGaveUp`, naming the statuses, once its patience is spent or `limit`
    deliveries were made without a 2xx. `sleep` and `clock` (seconds, monotonic) may be
    replaced in a test of a target that needs no real time to pass."""
    lease = (config if config is not None else DedupConfig.from_env()).lease_seconds
    patience = 2 * lease + 1.0
    if copies > 1:
        statuses = deliver_concurrently(url, event, copies, timeout=timeout)
    else:
        statuses = [deliver(url, event, timeout=timeout)]
    delay, waited, start = first_delay, 0.0, clock()
    while not any(200 <= s < 300 for s in statuses):
        waited = clock() - start
        if len(statuses) >= limit:
            raise DeliveryGaveUp(statuses, waited, patience, f"limit={limit} deliveries made")
        if waited >= patience:
            raise DeliveryGaveUp(
                statuses, waited, patience, f"waited past twice the lease of {lease} s, plus 1 s"
            )
        sleep(min(delay, patience / 8, patience - waited))
        delay *= 2
        statuses.append(deliver(url, event, timeout=timeout))
    return statuses
