"""The functions of main.py with crash points: served by the fault tests, never deployed.

    PYTHONPATH=. functions-framework --source tests/faults/crash_functions.py --target ...

With `CRASH_AT=<point>` in the environment, the first delivery that reaches `<point>` appends
the point's name to the file `CRASH_FILE` and stops there (sleeps), so the test can SIGKILL the
process group at exactly that step. Without `CRASH_AT` the functions behave as in main.py.

The points wrap the real code paths without changing them (lease mode: forward_webhook,
send_post_notification; transaction mode: sync_published_count):

* `before_claim`: `Deduplicator.run` entered, no Firestore call yet (both modes).
* `after_claim`: lease mode, record created (or lease taken over), the lease is ours;
  transaction mode, the transaction has begun (the marker was read before it, outside).
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
from collections.abc import Callable
from typing import Any

from google.cloud.firestore_v1.transaction import Transaction

import functions.forward_webhook
import functions.notifier
import functions.sync_published_count
from dedup.core import Deduplicator
from dedup.store import RecordStore

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


def _around(
    owner: Any,
    attribute: str,
    before: str | None = None,
    after: Callable[..., str | None] | None = None,
) -> None:
    """Replace `owner.attribute` by a wrapper that calls the crash points around it.

    `after(result, *args, **kwargs)` names the point to reach after the call, or None.
    """
    original = getattr(owner, attribute)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before is not None:
            crash_point(before)
        result = original(*args, **kwargs)
        if after is not None and (point := after(result, *args, **kwargs)) is not None:
            crash_point(point)
        return result

    setattr(owner, attribute, wrapper)


def _claimed(result: Any, *args: Any, **kwargs: Any) -> str | None:
    """After `RecordStore.create` / a lease take-over: a token means this delivery owns it."""
    action = kwargs.get("action", "claim")
    if result is None:
        return None
    if action in ("claim", "take over the lease of"):
        return "after_claim"
    if action == "mark sent":
        return "after_mark"
    return None


def _begun(result: Any, *args: Any, **kwargs: Any) -> str:
    """After `Transaction._begin`: transaction mode's claim (its writes still to come)."""
    return "after_claim"


def _effect_sent(result: Any, *args: Any, **kwargs: Any) -> str:
    return "after_effect"


def _committed(result: Any, *args: Any, **kwargs: Any) -> str:
    return "after_mark"


def _install() -> None:
    _around(Deduplicator, "run", before="before_claim")
    _around(RecordStore, "create", after=_claimed)
    _around(RecordStore, "update_if_unchanged", after=_claimed)
    _around(Transaction, "_begin", after=_begun)
    for module in (functions.forward_webhook, functions.notifier):
        _around(module, "post_once", before="in_handler", after=_effect_sent)
    _around(functions.sync_published_count, "count_deltas", before="in_handler")
    _around(Transaction, "_commit", before="after_effect", after=_committed)


if os.environ.get("CRASH_AT"):
    _install()

from main import (  # noqa: E402  (after the crash points are in place)
    forward_webhook,
    relay_outbox,
    send_post_notification,
    sync_published_count,
)

__all__ = ["forward_webhook", "relay_outbox", "send_post_notification", "sync_published_count"]
