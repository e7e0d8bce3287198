"""Events per second on one instance, at concurrency 1, 8 and 80, and its peak RSS at 80.

One instance is one process with one Firestore client, serving requests on `concurrency`
threads at once, as functions-framework does (gunicorn's gthread worker: one process,
`THREADS` request threads; Cloud Run sends up to `concurrency` requests at a time). Every
delivery is a fresh event (the common case, and the dearest). Each concurrency level runs in
its own process (`python -m bench.throughput CONCURRENCY EVENTS ROUNDS`), which imports
`main.py` first so that its RSS is a whole instance's; it prints one JSON line.

Implementations are measured in rounds, interleaved (baseline, lease, transaction, ... then
again), so that noise from the rest of the machine hits every one alike; a figure is the
median of its rounds. The emulator shares the machine's CPUs with the instance, so these are
relative figures: the ratio to the baseline's single write is what carries over.
"""

from __future__ import annotations

import json
import logging
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from google.cloud import firestore

from bench.child import hwm_mb, run_child
from bench.impls import FACTORIES

MODES = ("baseline", "lease", "transaction", "write_only")
"""The modes of the contract keys `throughput_<mode>_c<concurrency>`."""

EXTRA = ("lease_noop", "lease_spread")
"""Also measured: lease mode's dedup cost alone, and lease mode with spread keys."""

CONCURRENCY = (1, 8, 80)

WARMUP_PER_THREAD = 2


def child(concurrency: int, events: int, rounds: int) -> dict[str, Any]:
    """Measure every implementation at `concurrency` threads in this process."""
    import main  # noqa: F401  # a whole instance: every function of main.py loaded

    # main.py attached its stdout handler: keep making the log records, drop their output
    # (as the rest of the benchmark does), so stdout carries the one JSON result line.
    dedup_logger = logging.getLogger("dedup")
    for handler in list(dedup_logger.handlers):
        dedup_logger.removeHandler(handler)
    dedup_logger.addHandler(logging.NullHandler())
    dedup_logger.propagate = False
    client = firestore.Client()
    names = (*MODES, *EXTRA)
    impls = {name: FACTORIES[name](client) for name in names}
    run_id = uuid.uuid4().hex[:10]
    rates: dict[str, list[float]] = {name: [] for name in names}
    outcomes: dict[str, set[str]] = {name: set() for name in names}
    with ThreadPoolExecutor(concurrency) as pool:
        for name, impl in impls.items():
            warm = [f"{run_id}-{name}-warm-{i}" for i in range(WARMUP_PER_THREAD * concurrency)]
            list(pool.map(impl.deliver, warm))
        for round_ in range(rounds):
            for name, impl in impls.items():
                ids = [f"{run_id}-{name}-{round_}-{i}" for i in range(events)]
                start = time.perf_counter()
                outcomes[name].update(pool.map(impl.deliver, ids))
                rates[name].append(events / (time.perf_counter() - start))
    not_ran = {name: sorted(o) for name, o in outcomes.items() if o != {"ran"}}
    if not_ran:
        raise RuntimeError(f"fresh events were not all run: {not_ran}")
    return {
        "concurrency": concurrency,
        "events_per_round": events,
        "rounds": rounds,
        "events_per_s": {name: round(statistics.median(r), 1) for name, r in rates.items()},
        "rounds_events_per_s": {name: [round(x, 1) for x in r] for name, r in rates.items()},
        "vm_hwm_mb": hwm_mb(),
        "threads_alive": concurrency,
    }


def measure(events: int = 400, rounds: int = 3) -> list[dict[str, Any]]:
    """Run `child` at each concurrency level in its own interpreter; their results."""
    return [run_child("bench.throughput", c, events, rounds) for c in CONCURRENCY]


if __name__ == "__main__":
    print(json.dumps(child(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))))
