"""Events per second on one instance, async handlers against sync ones, at concurrency 8 and 80.

One instance is one process. The sync side is `bench.throughput`'s: a `Deduplicator` serving
`concurrency` request threads (gunicorn's gthread worker). The async side is what
`functions-framework --asgi` does: one event loop, `concurrency` requests in flight at once, an
`AsyncDeduplicator` awaiting an `async def` handler with the same effect (`bench.impls`: one
increment of `benchEffects/<event id>`, in the mode's way). Every delivery is a fresh event.

Both sides run in the same process (`python -m bench.asyncio_throughput CONCURRENCY EVENTS
ROUNDS`, one JSON line), in interleaved rounds (sync lease, async lease, sync transaction...),
so that noise hits both alike; a figure is the median of its rounds. The emulator shares the
machine's CPUs with the instance: the async / sync ratio is what carries over.
"""

from __future__ import annotations

import asyncio
import json
import logging
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from google.cloud import firestore

from bench.child import run_child
from bench.impls import EFFECTS, FACTORIES, SUFFIX, effect_fields
from dedup import AsyncDeduplicator, AsyncDelivery, DedupConfig, Mode

MODES = ("lease", "transaction", "write_only")
"""The modes of the contract keys `throughput_async_<mode>_c<concurrency>`."""

CONCURRENCY = (8, 80)

WARMUP_PER_WORKER = 2


class AsyncProject:
    """`bench.impls.Project`'s twin for async handlers: an `AsyncDeduplicator` in one mode."""

    def __init__(self, mode: Mode, project: str) -> None:
        """One AsyncDeduplicator (one LRU, one AsyncClient) per instance."""
        self.mode = mode
        self.dedup = AsyncDeduplicator(DedupConfig(project=project))

    async def deliver(self, event_id: str) -> str:
        """Run an async handler with the benchmark's effect through `AsyncDeduplicator.run`."""

        async def handler(delivery: AsyncDelivery) -> None:
            ref = delivery.client.collection(EFFECTS).document(event_id)
            writer = delivery.transaction if delivery.transaction is not None else delivery.batch
            if writer is None:
                await ref.set(effect_fields(event_id), merge=True)
            else:
                writer.set(ref, effect_fields(event_id), merge=True)

        return (await self.dedup.run(event_id, SUFFIX, handler, mode=self.mode)).kind.value


async def _in_flight(
    deliver: Callable[[str], Awaitable[str]], ids: list[str], concurrency: int
) -> list[str]:
    """Deliver `ids` with `concurrency` deliveries in flight at once on this loop."""
    pending = iter(ids)

    async def worker() -> list[str]:
        return [await deliver(event_id) for event_id in pending]

    done = await asyncio.gather(*(worker() for _ in range(concurrency)))
    return [outcome for outcomes in done for outcome in outcomes]


def child(concurrency: int, events: int, rounds: int) -> dict[str, Any]:
    """Measure sync and async deliveries of every mode at `concurrency` in this process."""
    dedup_logger = logging.getLogger("dedup")
    dedup_logger.addHandler(logging.NullHandler())
    dedup_logger.propagate = False
    client = firestore.Client()
    sync_impls = {mode: FACTORIES[mode](client) for mode in MODES}
    async_impls = {mode: AsyncProject(Mode(mode), client.project) for mode in MODES}
    run_id = uuid.uuid4().hex[:10]
    rates: dict[str, dict[str, list[float]]] = {"sync": {}, "async": {}}
    outcomes: set[str] = set()
    with ThreadPoolExecutor(concurrency) as pool, asyncio.Runner() as loop:

        def timed(side: str, mode: str, ids: list[str]) -> None:
            start = time.perf_counter()
            if side == "sync":
                outcomes.update(pool.map(sync_impls[mode].deliver, ids))
            else:
                outcomes.update(loop.run(_in_flight(async_impls[mode].deliver, ids, concurrency)))
            rates[side].setdefault(mode, []).append(len(ids) / (time.perf_counter() - start))

        for round_ in range(-1, rounds):  # round -1: warm-up, not counted
            for mode in MODES:
                for side in ("sync", "async"):
                    count = events if round_ >= 0 else WARMUP_PER_WORKER * concurrency
                    ids = [f"{run_id}-{side}-{mode}-{round_}-{i}" for i in range(count)]
                    timed(side, mode, ids)
                    if round_ < 0:
                        rates[side][mode].clear()
    if outcomes != {"ran"}:
        raise RuntimeError(f"fresh events were not all run: {sorted(outcomes)}")
    return {
        "concurrency": concurrency,
        "events_per_round": events,
        "rounds": rounds,
        "events_per_s": {
            side: {mode: round(statistics.median(r), 1) for mode, r in by_mode.items()}
            for side, by_mode in rates.items()
        },
        "rounds_events_per_s": {
            side: {mode: [round(x, 1) for x in r] for mode, r in by_mode.items()}
            for side, by_mode in rates.items()
        },
    }


def measure(events: int = 400, rounds: int = 3) -> list[dict[str, Any]]:
    """Run `child` at each concurrency level in its own interpreter; their results."""
    return [run_child("bench.asyncio_throughput", c, events, rounds) for c in CONCURRENCY]


if __name__ == "__main__":
    print(json.dumps(child(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))))
