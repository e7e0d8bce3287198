"""Peak RSS of a process handling 10,000 distinct events in lease mode.

`python -m bench.memory EVENTS THREADS` runs in its own process (so nothing else the benchmark
did counts) and prints one JSON line: peak RSS from `resource.getrusage` (ru_maxrss, KiB on
Linux) after warm-up and at the end, the kernel's VmHWM (this process's own peak), and the
LRU's size against its capacity.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from google.cloud import firestore

from bench.child import hwm_mb, peak_mb, run_child
from dedup import DedupConfig, Deduplicator, Delivery

SUFFIX = "benchMemory"


def _noop(delivery: Delivery) -> None:
    return None


def child(events: int, threads: int) -> dict[str, Any]:
    """Handle `events` fresh events through one Deduplicator on `threads` request threads."""
    logging.getLogger("dedup").addHandler(logging.NullHandler())
    dedup = Deduplicator(DedupConfig.from_env(), client=firestore.Client())
    run_id = uuid.uuid4().hex[:10]
    for i in range(20):
        dedup.run(f"{run_id}-warm-{i}", SUFFIX, _noop)
    warm = peak_mb()
    warm_hwm = hwm_mb()
    outcomes: Counter[str] = Counter()
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for chunk in range(0, events, 1000):
            ids = [f"{run_id}-{i}" for i in range(chunk, min(events, chunk + 1000))]
            for outcome in pool.map(lambda e: dedup.run(e, SUFFIX, _noop), ids):
                outcomes[outcome.kind.value] += 1
    return {
        "events": events,
        "threads": threads,
        "seconds": round(time.perf_counter() - start, 2),
        "peak_rss_mb": round(peak_mb(), 1),
        "peak_rss_mb_after_warmup": round(warm, 1),
        "vm_hwm_mb": _round(hwm_mb()),
        "vm_hwm_mb_after_warmup": _round(warm_hwm),
        "cache_len": len(dedup.sent_keys),
        "cache_capacity": dedup.config.cache_size,
        "outcomes": dict(outcomes),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def measure(events: int = 10_000, threads: int = 4) -> dict[str, Any]:
    """Run `child` in a separate interpreter and return its figures."""
    return run_child("bench.memory", events, threads)


if __name__ == "__main__":
    print(json.dumps(child(int(sys.argv[1]), int(sys.argv[2]))))
