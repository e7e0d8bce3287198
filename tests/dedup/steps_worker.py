"""An order handler of five durable steps, and a process that delivers one event through it and
SIGKILLs itself at a step boundary (used by tests/dedup/test_steps_crash.py).

    python -m tests.dedup.steps_worker EVENT_ID --kill-at N

The steps, in order: `reserve` (transactional: +1 on `stepEffects/<event>-reserve`), `charge`
(keyed: one call to an idempotent receiver, `stepKeys/<step_key>` counts its calls), `ledger`
(transactional), `notify` (keyed) and `receipt` (at most once: +1 on a plain write). The step
boundaries are numbered from 1 as the handler reaches them (`Step.BEFORE_STEP`,
`Step.AFTER_STEP_CALL`, `Step.AFTER_STEP_RECORD`); at boundary N the process kills itself with
SIGKILL, leaving its lease to expire.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
from dataclasses import replace
from typing import Any

from google.cloud import firestore

from dedup import DedupConfig, Deduplicator, Delivery, StepInterrupted
from dedup.kernel.delivery import Step
from tests.dedup.support import standing_clock

PROJECT = "demo-exactly-once"
SUFFIX = "orderSteps"
EFFECTS = "stepEffects"
KEYS = "stepKeys"
BOUNDARIES = (Step.BEFORE_STEP, Step.AFTER_STEP_CALL, Step.AFTER_STEP_RECORD)
BOUNDARY_COUNT = 13
"""2 transactional steps x 2 boundaries + 3 others x 3."""
CONFIG = DedupConfig(function_timeout_seconds=6, lease_seconds=8, rpc_timeout_seconds=2)
"""A short lease, so a killed delivery's expires soon, and room for five steps on a busy
machine."""
KILLED_CONFIG = replace(CONFIG, budget_clock=standing_clock)
"""The worker's: `CONFIG` on a clock that stands still (`tests.dedup.support.standing_clock`),
so that however long a busy machine holds it before its boundary, it never gives its lease
back or spends its budget there; it dies at the boundary, and its lease expires on the
database clock after `CONFIG.lease_seconds`."""
COPY_CONFIG = DedupConfig(function_timeout_seconds=30, lease_seconds=32, rpc_timeout_seconds=2)
"""The copies' (`test_steps_crash`): 39 deliveries at once in one process on a 2-core machine,
each of up to five steps. With `CONFIG`'s 6 s budget, one held long enough by a busy machine
would give up mid-step and its copy end in a retryable error, not in a step boundary's
result. A copy's longer lease changes nothing of what it takes over: the killed delivery's
lease is its own."""


def order_handler(client: firestore.Client) -> Any:
    """The five-step handler, its effects written through `client`."""

    def bump(transaction: Any, ref: Any) -> int:
        """Read the counter in the transaction and write it one higher."""
        n = int((ref.get(transaction=transaction).to_dict() or {}).get("n", 0)) + 1
        transaction.set(ref, {"n": n})
        return n

    def receive(key: str, step: str, event: str) -> str:
        """An idempotent receiver: every call counted under the key it was sent."""
        client.collection(KEYS).document(key.replace("/", "|")).set(
            {"calls": firestore.Increment(1), "step": step, "event": event}, merge=True
        )
        return f"{step}-ok"

    def send_receipt(ref: Any) -> None:
        """Not idempotent: each call is one more receipt."""
        ref.set({"n": firestore.Increment(1)}, merge=True)

    def handler(delivery: Delivery) -> None:
        event = delivery.event_id
        effects = client.collection(EFFECTS)
        delivery.step("reserve", bump, effects.document(f"{event}-reserve"), transactional=True)
        delivery.step("charge", receive, delivery.step_key("charge"), "charge", event)
        delivery.step("ledger", bump, effects.document(f"{event}-ledger"), transactional=True)
        delivery.step("notify", receive, delivery.step_key("notify"), "notify", event)
        receipt = effects.document(f"{event}-receipt")
        with contextlib.suppress(StepInterrupted):  # at most once: not sent again
            delivery.step("receipt", send_receipt, receipt, on_interrupted="skip")

    return handler


def main() -> int:
    """Deliver the event, dying at boundary `--kill-at`."""
    parser = argparse.ArgumentParser()
    parser.add_argument("event_id")
    parser.add_argument("--kill-at", type=int, required=True)
    args = parser.parse_args()
    client = firestore.Client(project=PROJECT)
    dedup = Deduplicator(KILLED_CONFIG, client=client)
    reached = [0]

    def die_at(step: Step, key: str) -> None:
        if step in BOUNDARIES:
            reached[0] += 1
            if reached[0] == args.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    dedup.on_step(die_at)
    dedup.run(args.event_id, SUFFIX, order_handler(client))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
