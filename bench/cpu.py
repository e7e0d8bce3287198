"""Client CPU per fresh delivery: what an instance pays for each event, the part of the price
that carries over from the emulator to production.

One plain `firestore.Client` (no RPC counter on its channel), one instance of each mode, and
fresh deliveries one at a time, interleaved round-robin across the modes so that the machine's
load hits every mode alike. Each delivery is timed with the process's CPU clock
(`time.process_time`: every thread of this process, gRPC's own included), so time spent
waiting for the emulator, which runs in another process, is not counted. The figure is the
mean over the deliveries (CPU adds up: it is what an instance is billed for); the ratio of
each mode to the baseline (one plain write of the same effect) is taken within the one run.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from google.cloud import firestore

from bench.impls import FACTORIES

MODES = ("baseline", "lease", "lease_noop", "transaction", "write_only", "record_writes")
"""The implementations measured (`bench.impls.FACTORIES`), the baseline first;
`record_writes` is the floor of `lease_noop` on the library's public API."""

WARMUP = 30
"""Untimed fresh deliveries per mode first (connections, caches, code paths)."""


def measure(deliveries: int) -> dict[str, Any]:
    """Mean and median client CPU (microseconds) per fresh delivery of each mode, and each
    mode's mean against the baseline's."""
    client = firestore.Client()
    run_id = uuid.uuid4().hex[:10]
    impls = {mode: FACTORIES[mode](client) for mode in MODES}
    for mode, impl in impls.items():
        for i in range(WARMUP):
            impl.deliver(f"{run_id}-cpu-warmup-{mode}-{i}")
    cpu_us: dict[str, list[float]] = {mode: [] for mode in MODES}
    for i in range(deliveries):
        for mode, impl in impls.items():
            event_id = f"{run_id}-cpu-{mode}-{i}"
            start = time.process_time()
            impl.deliver(event_id)
            cpu_us[mode].append((time.process_time() - start) * 1e6)
    mean = {mode: statistics.fmean(values) for mode, values in cpu_us.items()}
    return {
        "deliveries": deliveries,
        "mean_us": {mode: round(v, 1) for mode, v in mean.items()},
        "median_us": {mode: round(statistics.median(v), 1) for mode, v in cpu_us.items()},
        "ratio": {mode: round(mean[mode] / mean["baseline"], 3) for mode in MODES},
    }
