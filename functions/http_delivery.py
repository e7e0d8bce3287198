"""POST a payload with an `Idempotency-Key`, and classify the receiver's answer: the library's
`dedup.send`, re-exported under the name the functions import.

| receiver answer                       | raised                | dedup outcome              |
|---------------------------------------|-----------------------|----------------------------|
| 2xx                                   | nothing               | sent                       |
| 408, 425, 429, 5xx, timeout, refused  | `ReceiverUnavailable` | released, platform retries |
| any other 4xx                         | `dedup.TerminalError` | failed, recorded, no retry |

Error messages never show a URL's credentials or query string (see `dedup.send`).
"""

from __future__ import annotations

from dedup.send import (
    CONNECT_TIMEOUT_SECONDS,
    READ_TIMEOUT_SECONDS,
    RETRYABLE_CLIENT_ERRORS,
    ReceiverUnavailable,
    post_once,
)

__all__ = [
    "CONNECT_TIMEOUT_SECONDS",
    "READ_TIMEOUT_SECONDS",
    "RETRYABLE_CLIENT_ERRORS",
    "ReceiverUnavailable",
    "post_once",
]
