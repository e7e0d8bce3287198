"""A separate process that delivers one event through a Deduplicator (used by the tests).

    python -m tests.dedup.crash_worker EVENT_ID SUFFIX [--lease 60] [--hang] [--start-at EPOCH]
        [--mode lease] [--async] [--die-after-effect] [--note]

The handler's effect is one new document in `effects` (so the test can count effects). With
--hang the handler records its effect, prints STARTED and sleeps: the test SIGKILLs it while
it holds the lease. With --async the handler is an `async def` run by an AsyncDeduplicator
in an event loop. With --die-after-effect the handler returns after its effect and the process
prints STARTED and sleeps at `Step.AFTER_EFFECT`, before "sent" is written: the test SIGKILLs
it there (lease mode's ambiguous window). With --note the handler notes a `messageId` it chose
(`delivery.note`) before its effect, and the effect carries it. The outcome is printed as one
JSON line on stdout.

A worker that is to be killed (--hang, --die-after-effect) runs on `standing_clock`: on a busy
machine its own clock could count a short lease ended between the claim and the handler, and
it would give the lease back instead of reaching the point the test kills it at. Its lease is
judged by Firestore as ever. The racing workers (neither flag) keep the real clock, and a 60 s
lease by default: with 3 s, a winner that a busy machine held for 2.7 s between its claim and
its handler would give its lease back, and no worker of the race would run the event.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid

from google.cloud import firestore

from dedup import (
    AsyncDeduplicator,
    AsyncDelivery,
    DedupConfig,
    DedupError,
    Deduplicator,
    Delivery,
    Mode,
    Outcome,
    Step,
)
from tests.dedup.support import standing_clock

EFFECTS = "effects"


def main() -> int:
    """Deliver the event once; exit 0 with the outcome, or 3 with the DedupError raised."""
    parser = argparse.ArgumentParser()
    parser.add_argument("event_id")
    parser.add_argument("suffix")
    parser.add_argument("--lease", type=int, default=60)  # racing workers never wait it out
    parser.add_argument("--hang", action="store_true")
    parser.add_argument("--start-at", type=float, default=0.0)
    parser.add_argument("--mode", default=Mode.LEASE.value)
    parser.add_argument("--async", dest="use_async", action="store_true")
    parser.add_argument("--die-after-effect", action="store_true")
    parser.add_argument("--note", action="store_true")
    args = parser.parse_args()

    def stop_after_effect(step: Step, key: str) -> None:
        if step is Step.AFTER_EFFECT:
            print("STARTED", flush=True)
            time.sleep(120)

    killed = args.hang or args.die_after_effect
    config = DedupConfig(lease_seconds=args.lease, budget_clock=standing_clock if killed else None)
    client = firestore.Client(project="demo-exactly-once")
    deduplicator = Deduplicator(config, client=client)
    client.collection(EFFECTS).document("warmup").get()  # connect before the start line

    def handler(delivery: Delivery) -> None:
        effect: dict[str, object] = {"key": delivery.key, "attempt": delivery.attempt}
        if args.note:
            delivery.note(messageId=uuid.uuid4().hex)
            effect["messageId"] = delivery.notes["messageId"]
        if delivery.transaction is not None:
            delivery.transaction.create(client.collection(EFFECTS).document(), effect)
        elif delivery.batch is not None:
            delivery.batch.create(client.collection(EFFECTS).document(), effect)
        else:
            client.collection(EFFECTS).document().create(effect)
        if args.hang:
            print("STARTED", flush=True)
            time.sleep(120)

    async def async_handler(delivery: AsyncDelivery) -> None:
        effect: dict[str, object] = {"key": delivery.key, "attempt": delivery.attempt}
        if args.note:
            await delivery.note(messageId=uuid.uuid4().hex)
            effect["messageId"] = delivery.notes["messageId"]
        ref = delivery.client.collection(EFFECTS).document()
        if delivery.transaction is not None:
            delivery.transaction.create(ref, effect)
        elif delivery.batch is not None:
            delivery.batch.create(ref, effect)
        else:
            await ref.create(effect)
        if args.hang:
            print("STARTED", flush=True)
            await asyncio.sleep(120)

    async def deliver_async() -> Outcome:
        dedup = AsyncDeduplicator(
            config,
            client_factory=lambda: firestore.AsyncClient(project="demo-exactly-once"),
        )
        if args.die_after_effect:
            dedup.on_step(stop_after_effect)
        await dedup.store.client.collection(EFFECTS).document("warmup").get()  # connect
        await asyncio.sleep(max(0.0, args.start_at - time.time()))
        return await dedup.run(args.event_id, args.suffix, async_handler, mode=Mode(args.mode))

    if args.die_after_effect:
        deduplicator.on_step(stop_after_effect)
    try:
        if args.use_async:
            outcome = asyncio.run(deliver_async())
        else:
            time.sleep(max(0.0, args.start_at - time.time()))
            outcome = deduplicator.run(args.event_id, args.suffix, handler, mode=Mode(args.mode))
    except DedupError as exc:
        print(json.dumps({"error": type(exc).__name__}), flush=True)
        return 3
    print(json.dumps({"outcome": outcome.kind.value, "attempt": outcome.attempt}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
