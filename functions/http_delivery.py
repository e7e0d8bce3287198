"""POST a payload with an `Idempotency-Key`, and classify the receiver's answer.

The dedup module makes a retry carry the same key as the first attempt, so a receiver that
remembers keys drops the copy that the one at-least-once window (effect done, "sent" not yet
recorded) can produce. How answers are treated:

| receiver answer                       | raised                | dedup outcome              |
|---------------------------------------|-----------------------|----------------------------|
| 2xx                                   | nothing               | sent                       |
| 408, 425, 429, 5xx, timeout, refused  | `ReceiverUnavailable` | released, platform retries |
| any other 4xx                         | `dedup.TerminalError` | failed, recorded, no retry |
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dedup import TerminalError, propagation
from dedup.record import scrub_urls

if TYPE_CHECKING:
    import requests

CONNECT_TIMEOUT_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 20.0
"""Kept well under the default 60 s dedup lease: a slow receiver must not outlive the lease."""

RETRYABLE_CLIENT_ERRORS = frozenset({408, 425, 429})


class ReceiverUnavailable(Exception):
    """The receiver failed in a way a later attempt may not (5xx, 429, timeout, refused)."""


def post_once(
    url: str,
    body: bytes,
    *,
    content_type: str,
    idempotency_key: str,
    session: requests.Session | None = None,
) -> requests.Response:
    """POST `body` to `url`; return the 2xx response or raise as the module docstring says.

    Error messages name the URL without its credentials or query string. `requests` is
    imported on the first call, not at start-up: the functions that never POST do not load it.
    """
    import requests

    headers = {
        "Content-Type": content_type,
        "Idempotency-Key": idempotency_key,
        **propagation.headers(),  # the receiver's work joins the delivery's trace
    }
    sender = session or requests
    safe_url = scrub_urls(url)
    try:
        response = sender.post(
            url, data=body, headers=headers, timeout=(CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS)
        )
    # `from None`: requests' own messages repeat the full URL, token and all, and the
    # platform logs the whole exception chain.
    except requests.Timeout:
        raise ReceiverUnavailable(f"{safe_url} timed out") from None
    except requests.ConnectionError:
        raise ReceiverUnavailable(f"could not connect to {safe_url}") from None
    status = response.status_code
    if 200 <= status < 300:
        return response
    if status >= 500 or status in RETRYABLE_CLIENT_ERRORS:
        raise ReceiverUnavailable(f"{safe_url} answered {status}; will retry")
    raise TerminalError(f"{safe_url} refused the request with {status}; not retried")
