"""A separate process that delivers one event through a Deduplicator (used by the tests).

    python -m tests.dedup.crash_worker EVENT_ID SUFFIX --lease 3 [--hang] [--start-at EPOCH]
        [--mode lease]

The handler's effect is one new document in `effects` (so the test can count effects). With
--hang the handler records its effect, prints STARTED and sleeps: the test SIGKILLs it while
it holds the lease. The outcome is printed as one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from google.cloud import firestore

from dedup import DedupConfig, DedupError, Deduplicator, Delivery, Mode

EFFECTS = "effects"


def main() -> int:
    """Deliver the event once; exit 0 with the outcome, or 3 with the DedupError raised."""
    parser = argparse.ArgumentParser()
    parser.add_argument("event_id")
    parser.add_argument("suffix")
    parser.add_argument("--lease", type=int, default=3)
    parser.add_argument("--hang", action="store_true")
    parser.add_argument("--start-at", type=float, default=0.0)
    parser.add_argument("--mode", default=Mode.LEASE.value)
    args = parser.parse_args()

    client = firestore.Client(project="demo-exactly-once")
    deduplicator = Deduplicator(DedupConfig(lease_seconds=args.lease), client=client)
    client.collection(EFFECTS).document("warmup").get()  # connect before the start line

    def handler(delivery: Delivery) -> None:
        effect = {"key": delivery.key, "attempt": delivery.attempt}
        if delivery.transaction is not None:
            delivery.transaction.create(client.collection(EFFECTS).document(), effect)
        elif delivery.batch is not None:
            delivery.batch.create(client.collection(EFFECTS).document(), effect)
        else:
            client.collection(EFFECTS).document().create(effect)
        if args.hang:
            print("STARTED", flush=True)
            time.sleep(120)

    time.sleep(max(0.0, args.start_at - time.time()))
    try:
        outcome = deduplicator.run(args.event_id, args.suffix, handler, mode=Mode(args.mode))
    except DedupError as exc:
        print(json.dumps({"error": type(exc).__name__}), flush=True)
        return 3
    print(json.dumps({"outcome": outcome.kind.value, "attempt": outcome.attempt}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
