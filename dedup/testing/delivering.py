"""Deliveries of one event: once, copies at once from as many threads, and until one is
answered 2xx as the platform retries; to a URL or, in-process, to a Flask test client."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dedup.testing.event import HttpEvent

__all__ = [
    "DIRECT",
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


def deliver_until_done(
    url: Target,
    event: HttpEvent,
    *,
    copies: int = 1,
    limit: int = 50,
    timeout: float = 60.0,
) -> list[int]:
    """Deliver `copies` copies at once (one by default), then one at a time until one is
    answered 2xx, as the platform retries (at most `limit` deliveries); every status seen."""
    if copies > 1:
        statuses = deliver_concurrently(url, event, copies, timeout=timeout)
    else:
        statuses = [deliver(url, event, timeout=timeout)]
    while not any(200 <= s < 300 for s in statuses) and len(statuses) < limit:
        statuses.append(deliver(url, event, timeout=timeout))
    return statuses
