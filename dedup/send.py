"""POST a payload with an `Idempotency-Key`, and classify the receiver's answer.

`post_once(url, body, content_type=..., idempotency_key=delivery.key)` from a lease-mode
handler: every retry of one event carries the same key, so a receiver that remembers keys
drops the copy that lease mode's one at-least-once window (effect done, "sent" not yet
recorded) can produce. How answers are treated:

| receiver answer                               | raised                | dedup outcome       |
|-----------------------------------------------|-----------------------|---------------------|
| 2xx                                           | the response returned | sent                |
| 408, 425, 429, 5xx, timeout, refused, cut off | `ReceiverUnavailable` | released, retried   |
| any other 4xx; a URL it cannot send to        | `dedup.TerminalError` | failed, not retried |

`ReceiverUnavailable` is an ordinary exception: raised out of the handler, dedup releases the
lease and the platform redelivers the event (retries must be on: `dedup manifest`).

Secrets in URLs stay out of errors and logs: messages name the URL without its userinfo,
query string or fragment (`https://user:pw@host/hook?token=t` is `https://host/hook`), the
exception chain of `requests` (whose messages repeat the full URL) is cut, and the DEBUG lines
of urllib3's connection pool get their query strings removed (a filter on that logger only).
A secret in the path itself is not recognised: pass it in a header (`headers=`) or the query.

`import dedup` does not load this module, and this module loads `requests` on the first call
only: a function that never POSTs does not pay for it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from dedup.errors import TerminalError
from dedup.kernel.record import scrub_urls
from dedup.platform import propagation

if TYPE_CHECKING:
    import requests

__all__ = [
    "CONNECT_TIMEOUT_SECONDS",
    "READ_TIMEOUT_SECONDS",
    "RETRYABLE_CLIENT_ERRORS",
    "ReceiverUnavailable",
    "is_retryable",
    "post_once",
    "safe_url",
]

CONNECT_TIMEOUT_SECONDS = 5.0
"""How long `post_once` waits for the connection."""
READ_TIMEOUT_SECONDS = 20.0
"""How long `post_once` waits for the answer; kept well under the default 60 s dedup lease:
a slow receiver must not outlive the lease."""

RETRYABLE_CLIENT_ERRORS = frozenset({408, 425, 429})
"""The 4xx statuses a later attempt may not get (timeout, too early, too many requests)."""


class ReceiverUnavailable(Exception):
    """The receiver failed in a way a later attempt may not (5xx, 408/425/429, timeout,
    refused or cut-off connection): raised so the lease is released and the platform
    retries."""


def is_retryable(status: int) -> bool:
    """True for an answer a retry may fix: 5xx, 408, 425, 429 (2xx is neither)."""
    return status >= 500 or status in RETRYABLE_CLIENT_ERRORS


def safe_url(url: str) -> str:
    """`url` as errors name it: without userinfo, query string or fragment."""
    return scrub_urls(url)


_QUERY = re.compile(r"\?[^\s\"']*")


class _QueryScrubber(logging.Filter):
    """Removes query strings (and URL credentials) from a log record's message."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        scrubbed = _QUERY.sub("", scrub_urls(message))
        if scrubbed != message:
            record.msg, record.args = scrubbed, None
        return True


_SCRUBBER = _QueryScrubber()


def _scrub_urllib3_logs() -> None:
    """Attach the scrubber to urllib3's connection-pool logger (once): its DEBUG lines name
    each request's path and query."""
    pool_logger = logging.getLogger("urllib3.connectionpool")
    if _SCRUBBER not in pool_logger.filters:
        pool_logger.addFilter(_SCRUBBER)


def post_once(
    url: str,
    body: bytes,
    *,
    content_type: str,
    idempotency_key: str,
    session: requests.Session | None = None,
    headers: Mapping[str, str] | None = None,
) -> requests.Response:
    """POST `body` to `url` with `Content-Type: content_type`, `Idempotency-Key:
    idempotency_key` (pass `delivery.key`), the delivery's trace context and `headers`;
    return the 2xx response or raise as the module docstring says (`ReceiverUnavailable`,
    `TerminalError`). `session`: a `requests.Session` to send with (connection reuse)."""
    import requests

    _scrub_urllib3_logs()
    sent_headers = {
        **(headers or {}),
        "Content-Type": content_type,
        "Idempotency-Key": idempotency_key,
        **propagation.headers(),  # the receiver's work joins the delivery's trace
    }
    sender = session or requests
    shown = safe_url(url)
    try:
        response = sender.post(
            url,
            data=body,
            headers=sent_headers,
            timeout=(CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS),
        )
    # `from None` everywhere: requests' own messages repeat the full URL, token and all, and
    # the platform logs the whole exception chain.
    except requests.Timeout:
        raise ReceiverUnavailable(f"{shown} timed out") from None
    except requests.ConnectionError:
        raise ReceiverUnavailable(f"could not connect to {shown}") from None
    except (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema,
            requests.exceptions.InvalidSchema, requests.exceptions.InvalidHeader):  # fmt: skip
        raise TerminalError(f"cannot POST to {shown}: invalid URL or header") from None
    except requests.RequestException as failed:
        raise ReceiverUnavailable(f"{shown} failed ({type(failed).__name__})") from None
    status = response.status_code
    if 200 <= status < 300:
        return response
    if is_retryable(status):
        raise ReceiverUnavailable(f"{shown} answered {status}; will retry")
    raise TerminalError(f"{shown} refused the request with {status}; not retried")
