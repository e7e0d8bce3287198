"""A storm: 50 concurrent copies of each of 20 events, as at-least-once delivery can produce.

Copies are spread over several instances (each its own Firestore client and caches, like
separate function instances) and released at once. Every copy's outcome or error is recorded
by kind; effects are read back from the effect documents (what really committed). Copies that
raised are then redelivered, as the platform would retry them, until none raises.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.cloud import firestore

from bench.impls import FACTORIES, Implementation, effects_applied
from bench.naive import LeaseTaken
from dedup import LeaseHeld, StoreUnavailable

EXPECTED_ERRORS: dict[str, frozenset[str]] = {
    "lease": frozenset({"LeaseHeld"}),
    "naive": frozenset({"LeaseTaken"}),
    "transaction": frozenset(),
    "write_only": frozenset(),
}
"""Errors that are part of an implementation's design: "try later", the platform retries."""

RETRY_ROUNDS = 10

DEADLINE_SECONDS = 90.0
"""A storm still running after this is reported as unfinished (its copies count as unexpected
errors) instead of stalling the benchmark; its threads are abandoned (daemon threads)."""


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


def storm(
    impl: str,
    client_factory: Callable[[], firestore.Client],
    *,
    events: int = 20,
    copies: int = 50,
    instances: int = 10,
    deadline_s: float = DEADLINE_SECONDS,
) -> dict[str, Any]:
    """Run the storm for `impl` (a `FACTORIES` name); returns its figures."""
    run_id = uuid.uuid4().hex[:10]
    event_ids = [f"{run_id}-storm-{impl}-{e}" for e in range(events)]
    pool = [FACTORIES[impl](client_factory()) for _ in range(instances)]
    jobs = [
        (pool[(e * copies + c) % instances], eid)
        for c in range(copies)
        for e, eid in enumerate(event_ids)
    ]
    results: list[str | None] = [None] * len(jobs)
    errors: list[BaseException | None] = [None] * len(jobs)
    gate = threading.Event()

    def copy(index: int) -> None:
        instance, event_id = jobs[index]
        gate.wait()
        try:
            results[index] = instance.deliver(event_id)
        except Exception as exc:
            errors[index] = exc

    threads = [threading.Thread(target=copy, args=(i,), daemon=True) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    start = time.perf_counter()
    gate.set()
    for thread in threads:
        thread.join(timeout=max(0.0, start + deadline_s - time.perf_counter()))
    wall = time.perf_counter() - start
    unfinished = [i for i, t in enumerate(threads) if t.is_alive()]

    counts = Counter(error_kind(e) for e in errors if e is not None)
    if unfinished:
        counts[f"unfinished after {deadline_s:g} s"] = len(unfinished)
    outcomes = Counter(r for r in results if r is not None)
    expected = EXPECTED_ERRORS.get(impl, frozenset())
    client = pool[0].client  # type: ignore[attr-defined]
    effects = sum(effects_applied(client, event_ids).values())

    retried, rounds = (0, 0) if unfinished else _redeliver(jobs, errors)
    effects_after = sum(effects_applied(client, event_ids).values())
    return {
        "impl": impl,
        "events": events,
        "copies": copies,
        "instances": instances,
        "wall_s": round(wall, 3),
        "effects": effects,
        "expected_effects": events,
        "outcomes": dict(outcomes),
        "errors_by_kind": dict(counts),
        "expected_errors": sum(n for k, n in counts.items() if k in expected),
        "unexpected_errors": sum(n for k, n in counts.items() if k not in expected),
        "unfinished": len(unfinished),
        "redelivered": retried,
        "redelivery_rounds": rounds,
        "effects_after_redelivery": effects_after,
    }


def _redeliver(
    jobs: list[tuple[Implementation, str]], errors: list[BaseException | None]
) -> tuple[int, int]:
    """Redeliver failed copies (the platform's retry) until none fails; (deliveries, rounds)."""
    pending = [jobs[i] for i, e in enumerate(errors) if e is not None]
    delivered = 0
    for round_ in range(1, RETRY_ROUNDS + 1):
        if not pending:
            return delivered, round_ - 1
        delivered += len(pending)
        with ThreadPoolExecutor(16) as pool:
            futures = [(job, pool.submit(job[0].deliver, job[1])) for job in pending]
        pending = [job for job, future in futures if future.exception() is not None]
        time.sleep(0.2)
    if pending:
        raise RuntimeError(f"{len(pending)} storm copies still fail after {RETRY_ROUNDS} retries")
    return delivered, RETRY_ROUNDS
