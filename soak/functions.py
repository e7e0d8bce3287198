"""The three functions every soak process serves, one per dedup mode, and their effects.

=============  ============  ==========================================================
Function       Mode          Effect (what the final checks count)
=============  ============  ==========================================================
notify         lease         POST to the receiver's /notify with `Idempotency-Key`
                             = `Delivery.key`; a non-2xx answer raises (retried).
count          transaction   read `soakCount/<event>` in the transaction, write n + 1.
batch_count    write_only    `soakBatch/<event>`: n incremented in the marker's batch.
=============  ============  ==========================================================

Some event ids extend another by `-batch` (`order-7-batch`): with the old key rule (`-`
allowed in suffixes, the suffix `batch-count`), (`order-7-batch`, `count`) and (`order-7`,
`batch-count`) were one record, and the soak found the lost effects (docs/soak.md). Suffixes
may no longer hold `-`, so the write-only function is `batch_count`; the ids stay, to show
that distinct pairs never share a record.

Handlers also fail on purpose (`handler_failure_rate`) and kill their own process with SIGKILL
before or after the effect (`crash_rate`), so crashes land at the points that matter most.
"""

from __future__ import annotations

import os
import random
import signal
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from google.api_core.retry import Retry
from google.cloud import firestore

from dedup import Delivery, Mode

NOTIFY_PATH = "/notify"
COUNT_COLLECTION = "soakCount"
BATCH_COLLECTION = "soakBatch"
POST_ID_HEADER = "X-Soak-Post"
"""A fresh id on every notification POST, so that the receiver's record of a POST can be
matched with what its sender saw."""
RECEIVER_TIMEOUT_SECONDS = 10.0
"""The handler's HTTP timeout: above every delay the soak scripts into the receiver, so an
answer the receiver applied is always seen by the sender."""


@dataclass(frozen=True)
class Function:
    """One soak function: its name (URL path), dedup suffix and mode."""

    name: str
    suffix: str
    mode: Mode


FUNCTIONS: tuple[Function, ...] = (
    Function("notify", "notify", Mode.LEASE),
    Function("count", "count", Mode.TRANSACTION),
    Function("batch_count", "batch_count", Mode.WRITE_ONLY),
)
BY_NAME = {f.name: f for f in FUNCTIONS}


class InjectedFailure(RuntimeError):
    """A handler failure the soak made up: the platform retries the event."""


@dataclass
class Chaos:
    """The handler-side faults of one process; `report` records each one."""

    handler_failure_rate: float
    crash_rate: float
    report: Callable[[str], None]
    rng: random.Random
    unanswered: Callable[[str], None] = lambda post_id: None
    """Called with the `POST_ID_HEADER` of a notification whose answer never reached the
    handler (error, timeout, dropped connection): the receiver may have applied it anyway, and
    the retry repeats it under the same key, the downstream's documented window."""
    posts: Callable[[str], None] = lambda line: None
    """Called with `sent <post id>` just before each notification POST and `answered <post
    id>` when an answer (2xx or not) reached the handler: a POST sent and neither answered nor
    `unanswered` had a sender that died before the answer (its process was SIGKILLed), even
    when the receiver read it only after the driver saw the process die."""

    def maybe_fail(self, where: str) -> None:
        """Raise `InjectedFailure` with probability `handler_failure_rate`."""
        if self.rng.random() < self.handler_failure_rate:
            self.report(f"handler-failure-{where}")
            raise InjectedFailure(f"soak: injected handler failure ({where})")

    def maybe_crash(self, where: str) -> None:
        """SIGKILL this process with probability `crash_rate`."""
        if self.rng.random() < self.crash_rate:
            self.report(f"crash-{where}")
            os.kill(os.getpid(), signal.SIGKILL)


def _read_timeout(delivery: Delivery) -> float:
    """The timeout of a handler's read: what is left of the delivery's budget (0.1 s at least)."""
    left = delivery.time_left()
    return RECEIVER_TIMEOUT_SECONDS if left is None else max(0.1, left)


def handler_for(function: Function, chaos: Chaos, receiver_url: str) -> Callable[[Delivery], None]:
    """The handler of `function`, with `chaos` injected around its effect."""
    if function.mode is Mode.LEASE:

        def notify(delivery: Delivery) -> None:
            chaos.maybe_crash("before-effect")
            post_id = uuid.uuid4().hex
            request = urllib.request.Request(
                receiver_url + NOTIFY_PATH,
                data=delivery.event_id.encode(),
                headers={
                    "Idempotency-Key": delivery.key,
                    "Content-Type": "text/plain",
                    POST_ID_HEADER: post_id,
                },
                method="POST",
            )
            chaos.posts(f"sent {post_id}")
            try:
                with urllib.request.urlopen(request, timeout=RECEIVER_TIMEOUT_SECONDS) as answer:
                    answer.read()
            except urllib.error.HTTPError as exc:  # the receiver's answer arrived: a refusal
                chaos.posts(f"answered {post_id}")
                raise InjectedFailure(f"receiver did not accept the notification: {exc}") from exc
            except (urllib.error.URLError, OSError) as exc:
                chaos.unanswered(post_id)
                raise InjectedFailure(f"receiver did not accept the notification: {exc}") from exc
            chaos.posts(f"answered {post_id}")
            chaos.maybe_crash("after-effect")

        return notify

    if function.mode is Mode.TRANSACTION:

        def count(delivery: Delivery) -> None:
            assert delivery.transaction is not None
            chaos.maybe_crash("before-effect")
            chaos.maybe_fail("count")
            ref = delivery.client.collection(COUNT_COLLECTION).document(delivery.event_id)
            # The handler bounds its own read, its retries included, by what is left of the
            # delivery's time budget, as docs/configuration.md asks: a read waiting on a locked
            # document, or retried after a transient error, would otherwise outlast the
            # function's timeout.
            left = _read_timeout(delivery)
            snapshot = ref.get(
                transaction=delivery.transaction, retry=Retry(timeout=left), timeout=left
            )
            n = int((snapshot.to_dict() or {}).get("n", 0)) if snapshot.exists else 0
            delivery.transaction.set(ref, {"n": n + 1, "event": delivery.event_id})

        return count

    def batch_count(delivery: Delivery) -> None:
        assert delivery.batch is not None
        chaos.maybe_crash("before-effect")
        chaos.maybe_fail("batch_count")
        ref = delivery.client.collection(BATCH_COLLECTION).document(delivery.event_id)
        delivery.batch.set(
            ref, {"n": firestore.Increment(1), "event": delivery.event_id}, merge=True
        )

    return batch_count
