"""A storm: 50 concurrent copies of each of 20 events over 10 instances (the storm protocol).

Each instance has its own Firestore client and the sent-keys cache off, so every copy goes to
Firestore as on instances that never saw the event. The 1,000 copies are released at once;
a copy that raises (LeaseHeld, a store error, the naive pattern's "lease taken" or its
transaction giving up) is redelivered 0.1 s later, as the platform would, until it is
acknowledged. Recorded per storm: handler calls and committed effects per event (exactly once
means one effect per event, and in lease mode one handler call), errors by kind (store errors
apart), every RPC sent (`bench.rpc_count`) per delivery and per copy.

`warm` storms run on the shared emulator, which has served the rest of the benchmark; `cold`
storms on a Firestore emulator started right before (`demo.own_firestore`), whose first
seconds under load answer with lock timeouts and deadlines: the store errors the storms
exercise.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.cloud import firestore

from bench.impls import STORM_FACTORIES, effects_applied
from bench.naive import LeaseTaken
from bench.rpc_count import RpcCounter, counting_client
from dedup import LeaseHeld, StoreUnavailable
from demo.own_firestore import own_firestore

EVENTS = 20
COPIES = 50
INSTANCES = 10
REDELIVERY_DELAY_SECONDS = 0.1
GIVE_UP_SECONDS = 150.0
"""A copy still not acknowledged after this is counted unfinished instead of stalling the
benchmark."""
NAIVE_GIVE_UP_SECONDS = 20.0
NAIVE_COPIES = 10
"""The naive pattern's bounds (`--naive-storm-seconds`, `--naive-storm-copies`): its copies
keep running into each other's 60-second leases and its transactions into each other's locks,
so with 50 copies run to the end its storm takes minutes (and a copy inside a transaction
ends only when the transaction does); bounded, it shows the same thing (effects per event,
copies left unacknowledged, errors, RPCs per delivery)."""

EXPECTED_ERRORS: dict[str, frozenset[str]] = {
    "lease": frozenset({"LeaseHeld"}),
    "naive": frozenset({"LeaseTaken"}),
    "transaction": frozenset(),
    "write_only": frozenset(),
}
"""Errors that are part of an implementation's design: "try later", the platform retries."""

STORE_ERROR_KINDS = frozenset(
    {"StoreUnavailable", "contention: transaction gave up after its attempts (Aborted)"}
)
"""Errors that mean the store failed the delivery (plus every raw gRPC error)."""


def error_kind(exc: BaseException) -> str:
    """A short name for an error raised by a delivery."""
    if isinstance(exc, LeaseHeld):
        return "LeaseHeld"
    if isinstance(exc, LeaseTaken):
        return "LeaseTaken"
    if isinstance(exc, StoreUnavailable):
        return "StoreUnavailable"
    if isinstance(exc, ValueError) and isinstance(exc.__cause__, api_exceptions.Aborted):
        return "contention: transaction gave up after its attempts (Aborted)"
    if isinstance(exc, api_exceptions.GoogleAPICallError):
        return f"{type(exc).__name__} (gRPC)"
    return type(exc).__name__


def is_store_error(kind: str) -> bool:
    """True for an error kind that is the store failing (not a designed "try later")."""
    return kind in STORE_ERROR_KINDS or kind.endswith("(gRPC)")


def storm(
    impl: str,
    client_factory: Callable[[], firestore.Client],
    counter: RpcCounter,
    *,
    events: int = EVENTS,
    copies: int = COPIES,
    instances: int = INSTANCES,
    give_up_s: float = GIVE_UP_SECONDS,
) -> dict[str, Any]:
    """Run the storm for `impl` (a `STORM_FACTORIES` name) on clients counting into `counter`."""
    run_id = uuid.uuid4().hex[:10]
    event_ids = [f"{run_id}-storm-{impl}-{e}" for e in range(events)]
    pool = [STORM_FACTORIES[impl](client_factory()) for _ in range(instances)]
    lock = threading.Lock()
    calls: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    deliveries = 0
    gate = threading.Event()
    rpcs_before = sum(counter.total().values())

    def copy(index: int) -> bool:
        nonlocal deliveries
        instance = pool[index % instances]
        event_id = event_ids[index % events]

        def hook() -> None:
            with lock:
                calls[event_id] += 1

        gate.wait()
        deadline = time.monotonic() + give_up_s
        while time.monotonic() < deadline:
            with lock:
                deliveries += 1
            try:
                instance.deliver(event_id, hook)
                return True
            except Exception as exc:  # every error is counted, then redelivered
                kind = error_kind(exc)
                with lock:
                    errors[kind] += 1
                time.sleep(REDELIVERY_DELAY_SECONDS)
        return False

    with ThreadPoolExecutor(events * copies) as threads:
        futures = [threads.submit(copy, i) for i in range(events * copies)]
        start = time.perf_counter()
        gate.set()
        acknowledged = sum(f.result() for f in futures)
    wall = time.perf_counter() - start
    rpcs = sum(counter.total().values()) - rpcs_before
    client = pool[0].client  # type: ignore[attr-defined]
    effects = effects_applied(client, event_ids)
    per_event_calls = [calls[e] for e in event_ids]
    per_event_effects = list(effects.values())
    expected = EXPECTED_ERRORS[impl]
    return {
        "impl": impl,
        "give_up_s": give_up_s,
        "events": events,
        "copies": copies,
        "instances": instances,
        "wall_s": round(wall, 2),
        "acknowledged": acknowledged,
        "unfinished": events * copies - acknowledged,
        "deliveries": deliveries,
        "handler_calls": sum(per_event_calls),
        "handler_calls_per_event_max": max(per_event_calls),
        "effects": sum(per_event_effects),
        "effects_per_event_min": min(per_event_effects),
        "effects_per_event_max": max(per_event_effects),
        "exactly_once": set(per_event_effects) == {1},
        "errors_by_kind": dict(errors),
        "expected_errors": sum(n for k, n in errors.items() if k in expected),
        "store_errors": sum(n for k, n in errors.items() if is_store_error(k)),
        "unexpected_errors": sum(n for k, n in errors.items() if k not in expected),
        "rpcs": rpcs,
        "rpcs_per_delivery": round(rpcs / max(1, deliveries), 2),
        "rpcs_per_copy": round(rpcs / (events * copies), 2),
    }


@dataclass(frozen=True)
class NaiveBounds:
    """How far the naive pattern's storms go: seconds before a copy gives up, copies per event."""

    seconds: float = NAIVE_GIVE_UP_SECONDS
    copies: int = NAIVE_COPIES

    def for_storm(self, impl: str) -> dict[str, Any]:
        """`storm`'s keyword arguments for `impl`: these bounds for naive, the defaults else."""
        return {"give_up_s": self.seconds, "copies": self.copies} if impl == "naive" else {}


DEFAULT_NAIVE_BOUNDS = NaiveBounds()


def warm_storm(impl: str, naive: NaiveBounds = DEFAULT_NAIVE_BOUNDS) -> dict[str, Any]:
    """The storm on the shared emulator (FIRESTORE_EMULATOR_HOST)."""
    counter = RpcCounter()
    result = storm(impl, lambda: counting_client(counter), counter, **naive.for_storm(impl))
    return {"where": "warm", **result}


def cold_storm(
    impl: str, workdir: Path, naive: NaiveBounds = DEFAULT_NAIVE_BOUNDS
) -> dict[str, Any]:
    """The storm on a Firestore emulator started right before it; the emulator's start-up time
    is reported apart."""
    counter = RpcCounter()
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with own_firestore(workdir) as emulator:
        ready = time.perf_counter() - started
        result = storm(
            impl,
            lambda: counting_client(counter, host=emulator.host),
            counter,
            **naive.for_storm(impl),
        )
    return {"where": "cold", "emulator_start_s": round(ready, 1), **result}
