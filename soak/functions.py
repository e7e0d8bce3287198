"""The four functions every soak process serves, one per dedup mode and one of durable steps,
and their effects.

=============  ============  ==========================================================
Function       Mode          Effect (what the final checks count)
=============  ============  ==========================================================
notify         lease         POST to the receiver's /notify with `Idempotency-Key`
                             = `Delivery.key`; a non-2xx answer raises (retried).
count          transaction   read `soakCount/<event>` in the transaction, write n + 1.
batch_count    write_only    `soakBatch/<event>`: n incremented in the marker's batch.
steps          lease, three  `count` (transactional): read `soakStepCount/<event>` in the
               durable       step's transaction, write n + 1. `post` (keyed): POST to
               steps         /step-post with `Idempotency-Key` = `step_key("post")`.
                             `receipt` (at most once): POST to /receipt with no key; a
                             delivery that finds it interrupted (`StepInterrupted`) logs
                             the event as skipped and carries on.
=============  ============  ==========================================================

Some event ids extend another by `-batch` (`order-7-batch`): with the old key rule (`-`
allowed in suffixes, the suffix `batch-count`), (`order-7-batch`, `count`) and (`order-7`,
`batch-count`) were one record, and the soak found the lost effects (docs/soak.md). Suffixes
may no longer hold `-`, so the write-only function is `batch_count`; the ids stay, to show
that distinct pairs never share a record.

Handlers also fail on purpose (`handler_failure_rate`) and kill their own process with SIGKILL
before or after the effect (`crash_rate`), so crashes land at the points that matter most: for
`steps`, before its first step, inside its transaction, and after each POST before the step
records it (the window a keyed step repeats under its key, and an at-most-once step is
interrupted in).
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
from typing import Any

from google.api_core.retry import Retry
from google.cloud import firestore

from dedup import Delivery, Mode, StepInterrupted

NOTIFY_PATH = "/notify"
STEP_POST_PATH = "/step-post"
"""Where the `steps` function's keyed step POSTs, with the step's key."""
RECEIPT_PATH = "/receipt"
"""Where the `steps` function's at-most-once step POSTs, with no key: every POST the receiver
applies is one more receipt."""
COUNT_COLLECTION = "soakCount"
BATCH_COLLECTION = "soakBatch"
STEP_COUNT_COLLECTION = "soakStepCount"
"""The `steps` function's transactional step: `soakStepCount/<event>`, n + 1."""
COUNT_STEP, POST_STEP, RECEIPT_STEP = "count", "post", "receipt"
"""The names of the `steps` function's steps, in the order it calls them."""
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
    Function("steps", "steps", Mode.LEASE),
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
    skipped: Callable[[str], None] = lambda event_id: None
    """Called with the event id when the `steps` function's at-most-once step was interrupted
    by an earlier delivery (`StepInterrupted`): the handler carries on without it."""

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
    if function.name == "steps":
        return steps_handler(chaos, receiver_url)
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


def _post(url: str, event_id: str, timeout: float, headers: dict[str, str]) -> None:
    """POST the event id to `url`; `InjectedFailure` (retried) unless answered 2xx."""
    request = urllib.request.Request(
        url,
        data=event_id.encode(),
        headers={"Content-Type": "text/plain", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            answer.read()
    except (urllib.error.URLError, OSError) as exc:  # an HTTPError is a URLError
        raise InjectedFailure(f"receiver did not accept the POST to {url}: {exc}") from exc


def steps_handler(chaos: Chaos, receiver_url: str) -> Callable[[Delivery], None]:
    """The `steps` function: one transactional, one keyed and one at-most-once step (see the
    module docstring), with `chaos` injected inside and between them. Its POSTs wait no longer
    than what is left of the delivery's time budget."""

    def bump(transaction: Any, delivery: Delivery) -> int:
        chaos.maybe_crash("in-step-transaction")
        chaos.maybe_fail("steps")
        ref = delivery.client.collection(STEP_COUNT_COLLECTION).document(delivery.event_id)
        left = _read_timeout(delivery)  # bounded by the budget, as `count`'s read
        snapshot = ref.get(transaction=transaction, retry=Retry(timeout=left), timeout=left)
        n = int((snapshot.to_dict() or {}).get("n", 0)) if snapshot.exists else 0
        transaction.set(ref, {"n": n + 1, "event": delivery.event_id})
        return n + 1

    def post(delivery: Delivery, key: str) -> None:
        url = receiver_url + STEP_POST_PATH
        _post(url, delivery.event_id, _read_timeout(delivery), {"Idempotency-Key": key})
        chaos.maybe_crash("after-step-post")  # called, not recorded: repeated under its key

    def receipt(delivery: Delivery) -> None:
        _post(receiver_url + RECEIPT_PATH, delivery.event_id, _read_timeout(delivery), {})
        chaos.maybe_crash("after-step-receipt")  # started, never ended: interrupted

    def steps(delivery: Delivery) -> None:
        chaos.maybe_crash("before-effect")
        delivery.step(COUNT_STEP, bump, delivery, transactional=True)
        delivery.step(POST_STEP, post, delivery, delivery.step_key(POST_STEP))
        try:
            delivery.step(RECEIPT_STEP, receipt, delivery, on_interrupted="skip")
        except StepInterrupted:
            chaos.skipped(delivery.event_id)  # at most once: never sent again

    return steps
