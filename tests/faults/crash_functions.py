"""The functions of main.py with crash points: served by the fault tests, never deployed.

    PYTHONPATH=. functions-framework --source tests/faults/crash_functions.py --target ...

With `CRASH_AT=<point>` in the environment, the first delivery that reaches `<point>` appends
the point's name to the file `CRASH_FILE` and stops there (sleeps), so the test can SIGKILL the
process group at exactly that step. Without `CRASH_AT` the functions behave as in main.py.

The dedup steps come from `Deduplicator.on_step` (`dedup.Step`), named, not matched on
messages; `in_handler` wraps the business code (lease mode: forward_webhook,
send_post_notification, daily_digest before its POST; transaction mode: sync_published_count,
register_upload between its two buffered writes):

* `before_claim`: `Deduplicator.run` entered, no Firestore call yet (both modes).
* `after_claim`: lease mode, record created (or lease taken over), the lease is ours;
  transaction mode, the marker was read, the transaction not begun.
* `in_handler`: the handler runs, before its POST / before its transactional writes.
* `after_effect`: lease mode, the POST was answered 2xx and "sent" is not recorded yet;
  transaction mode, writes and marker are buffered and the commit not yet sent.
* `after_mark`: lease mode, "sent" recorded; transaction mode, committed; in both the HTTP
  answer has not been returned to the platform yet.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from typing import Any

import functions.daily_digest
import functions.forward_webhook
import functions.notifier
import functions.register_upload
import functions.sync_published_count
from dedup.kernel.front_door import default_deduplicator

POINTS = ("before_claim", "after_claim", "in_handler", "after_effect", "after_mark")
"""Every crash point, in the order a delivery reaches them."""

_armed = threading.Event()
_armed.set()


def crash_point(name: str) -> None:
    """Stop here (forever) if this is the configured point: the test then kills the group."""
    if os.environ.get("CRASH_AT") != name or not _armed.is_set():
        return
    _armed.clear()
    with open(os.environ["CRASH_FILE"], "a") as reached:
        reached.write(f"{name}\n")
    time.sleep(3600)


def _before(owner: Any, attribute: str, point: str) -> None:
    """Replace `owner.attribute` by a wrapper that reaches `point` before the call."""
    original = getattr(owner, attribute)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        crash_point(point)
        return original(*args, **kwargs)

    setattr(owner, attribute, wrapper)


def _install() -> None:
    default_deduplicator().on_step(lambda step, key: crash_point(step.value))
    for module in (functions.forward_webhook, functions.notifier):
        _before(module, "post_once", "in_handler")
    _before(functions.sync_published_count, "count_deltas", "in_handler")
    _before(functions.daily_digest, "post_once", "in_handler")
    _before(functions.register_upload, "upload_document_id", "in_handler")


if os.environ.get("CRASH_AT"):
    _install()

from main import (  # noqa: E402  (after the crash points are in place)
    daily_digest,
    forward_webhook,
    register_upload,
    relay_outbox,
    send_post_notification,
    sync_published_count,
)

__all__ = [
    "daily_digest",
    "forward_webhook",
    "register_upload",
    "relay_outbox",
    "send_post_notification",
    "sync_published_count",
]
