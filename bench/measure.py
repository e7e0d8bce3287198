"""RPCs and latency per delivery kind and implementation, one delivery at a time.

Kinds:

* `fresh`: an event nobody has seen;
* `duplicate`: an event already sent by another instance (this instance's cache is cold);
* `duplicate_cached`: the same duplicate delivered again to this instance (its LRU knows it);
* `duplicate_leased`: an event another instance is working on right now (its handler is
  blocked inside the lease) — lease mode raises `LeaseHeld`, naive skips on its marker.

Fresh deliveries of all implementations are interleaved round-robin, and so are duplicates,
so that noise from other processes on the machine hits every implementation alike.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from google.cloud import firestore

from bench.impls import FACTORIES, Implementation
from bench.rpc_count import RpcCounter
from dedup import LeaseHeld

KINDS = ("fresh", "duplicate", "duplicate_cached", "duplicate_leased")

PLAN: dict[str, tuple[str, ...]] = {
    "baseline": ("fresh", "duplicate"),
    "naive": ("fresh", "duplicate", "duplicate_leased"),
    "lease": KINDS,
    "transaction": ("fresh", "duplicate", "duplicate_cached"),
    "write_only": ("fresh", "duplicate", "duplicate_cached"),
    "naive_noop": ("fresh",),
    "lease_noop": ("fresh",),
}
"""Which kinds each implementation can have: no cache in baseline and naive, no lease held
in baseline, transaction and write-only modes (they have none)."""

HOLDERS_AT_ONCE = 25
"""Leases held open at a time for `duplicate_leased`."""

WARMUP = 20
"""Untimed fresh deliveries per implementation before measuring."""


@dataclass
class Series:
    """Measurements of one (implementation, kind)."""

    impl: str
    kind: str
    ms: list[float] = field(default_factory=list)
    rpcs: list[int] = field(default_factory=list)
    reads: int = 0
    writes: int = 0
    methods: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        """Median/p99 latency, RPCs per delivery (median, min, max), RPCs by method and the
        document reads and writes per delivery (mean)."""
        n = len(self.ms)
        return {
            "impl": self.impl,
            "kind": self.kind,
            "deliveries": n,
            "median_ms": round(statistics.median(self.ms), 3),
            "p99_ms": round(statistics.quantiles(self.ms, n=100)[98], 3),
            "rpcs": statistics.median(self.rpcs),
            "rpcs_min": min(self.rpcs),
            "rpcs_max": max(self.rpcs),
            "rpcs_by_method": {m: round(c / n, 3) for m, c in sorted(self.methods.items())},
            "doc_reads": round(self.reads / n, 3),
            "doc_writes": round(self.writes / n, 3),
            "outcomes": dict(self.outcomes),
        }


class Matrix:
    """Runs the measurements on one counting client."""

    def __init__(self, client: firestore.Client, counter: RpcCounter, n: int) -> None:
        """`n` timed deliveries per (implementation, kind)."""
        self.client = client
        self.counter = counter
        self.n = n
        self.run_id = uuid.uuid4().hex[:10]
        self.measured = {name: FACTORIES[name](client) for name in PLAN}
        """The instances measured (their caches start cold)."""
        self.others = {name: FACTORIES[name](client) for name in PLAN}
        """Other instances: they send the events the measured ones then see as duplicates."""
        self.series = {(i, k): Series(i, k) for i, kinds in PLAN.items() for k in kinds}

    def event_ids(self, impl: str, kind: str, count: int) -> list[str]:
        """Distinct event ids for this run, implementation and kind."""
        return [f"{self.run_id}-{impl}-{kind}-{i}" for i in range(count)]

    def timed(self, impl: str, kind: str, event_id: str) -> None:
        """Deliver once to the measured instance, recording latency, RPCs and outcome."""
        series = self.series[(impl, kind)]
        with self.counter.scope() as bucket:
            start = time.perf_counter()
            try:
                outcome = self.measured[impl].deliver(event_id)
            except LeaseHeld:
                outcome = "LeaseHeld"
            elapsed = time.perf_counter() - start
        series.ms.append(elapsed * 1000)
        series.rpcs.append(bucket.rpcs)
        series.methods.update(bucket.calls)
        series.reads += bucket.reads
        series.writes += bucket.writes
        series.outcomes[outcome] += 1

    def run(self, progress: Callable[[str], None]) -> list[dict[str, Any]]:
        """Every series of `PLAN`; returns their summaries."""
        for name, impl in self.measured.items():
            for event_id in self.event_ids(name, "warmup", WARMUP):
                impl.deliver(event_id)
        progress("fresh")
        self._fresh()
        progress("duplicates")
        self._duplicates()
        progress("duplicates while a lease is held")
        self._leased()
        return [s.summary() for s in self.series.values()]

    def _with_kind(self, kind: str) -> list[str]:
        return [impl for impl, kinds in PLAN.items() if kind in kinds]

    def _fresh(self) -> None:
        impls = self._with_kind("fresh")
        ids = {impl: self.event_ids(impl, "fresh", self.n) for impl in impls}
        for i in range(self.n):
            for impl in impls:
                self.timed(impl, "fresh", ids[impl][i])

    def _duplicates(self) -> None:
        impls = self._with_kind("duplicate")
        ids = {impl: self.event_ids(impl, "duplicate", self.n) for impl in impls}
        _parallel((self.others[impl].deliver, event_id) for impl in impls for event_id in ids[impl])
        for i in range(self.n):
            for impl in impls:
                self.timed(impl, "duplicate", ids[impl][i])
                if "duplicate_cached" in PLAN[impl]:
                    self.timed(impl, "duplicate_cached", ids[impl][i])

    def _leased(self) -> None:
        for impl in self._with_kind("duplicate_leased"):
            ids = self.event_ids(impl, "leased", self.n)
            for start in range(0, self.n, HOLDERS_AT_ONCE):
                chunk = ids[start : start + HOLDERS_AT_ONCE]
                with _Holders(self.others[impl], chunk):
                    for event_id in chunk:
                        self.timed(impl, "duplicate_leased", event_id)


def _parallel(calls: Iterable[tuple[Callable[[str], Any], str]], workers: int = 8) -> None:
    """Run setup deliveries on a thread pool, re-raising the first error."""
    with ThreadPoolExecutor(workers) as pool:
        for future in [pool.submit(fn, arg) for fn, arg in calls]:
            future.result()


class _Holders:
    """Deliveries of `event_ids` on `impl`, each blocked inside its handler (lease held)."""

    def __init__(self, impl: Implementation, event_ids: list[str]) -> None:
        self.impl = impl
        self.event_ids = event_ids
        self.inside = threading.Semaphore(0)
        self.release = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._hold, args=(e,)) for e in event_ids]

    def _hold(self, event_id: str) -> None:
        def hook() -> None:
            self.inside.release()
            self.release.wait(timeout=120)

        try:
            self.impl.deliver(event_id, hook)
        except BaseException as exc:  # reported by __exit__
            self.errors.append(exc)
            self.inside.release()

    def __enter__(self) -> _Holders:
        for thread in self.threads:
            thread.start()
        for _ in self.threads:
            if not self.inside.acquire(timeout=60):
                raise RuntimeError("a lease holder never reached its handler")
        if self.errors:
            raise RuntimeError(f"a lease holder failed: {self.errors[0]!r}") from self.errors[0]
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release.set()
        for thread in self.threads:
            thread.join(timeout=120)
        if self.errors:
            raise RuntimeError(f"a lease holder failed: {self.errors[0]!r}") from self.errors[0]
