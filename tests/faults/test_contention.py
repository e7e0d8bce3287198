"""Contention storm: many concurrent deliveries of few events, across two instances."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from demo.events import HttpEvent, pubsub_event
from demo.receiver import Receiver
from demo.serve import ServedFunction
from tests.faults.support import (
    PROJECT,
    Spec,
    deliver,
    delivery_lines,
    redeliver_until_acknowledged,
    serving,
    unique,
)

pytestmark = pytest.mark.needs_emulators  # served functions reach the emulators

EVENTS = 10
DELIVERIES = 200
INSTANCES = 2
THREADS_PER_INSTANCE = 32
"""functions-framework's gunicorn threads per instance (its default is 4 per CPU)."""
BOUND_SECONDS = 60.0


def test_storm_of_concurrent_deliveries_has_one_effect_per_event(
    receiver: Receiver, tmp_path: Path
) -> None:
    """200 deliveries of 10 Pub/Sub messages, all at once, spread over two instances of
    forward_webhook: exactly 10 POSTs reach the receiver (one per message, under its key), the
    storm ends within a bound, and every refused delivery was refused with LeaseHeld (no
    LeaseLost, no StoreUnavailable, no handler error)."""
    run = unique()
    events = [
        pubsub_event("webhooks", b'{"storm": %d}' % n, project=PROJECT, message_id=f"s{n}-{run}")
        for n in range(EVENTS)
    ]
    env = {"THREADS": str(THREADS_PER_INSTANCE)}
    specs = {f"instance-{i}": Spec("forward_webhook", env) for i in range(INSTANCES)}
    with serving(specs, tmp_path) as servers:
        instances = list(servers.values())
        plan = [(instances[n % INSTANCES], events[n % EVENTS]) for n in range(DELIVERIES)]
        random.Random(7).shuffle(plan)
        gate = threading.Barrier(DELIVERIES)

        def one(job: tuple[ServedFunction, HttpEvent]) -> int:
            gate.wait()  # all 200 requests leave together
            return deliver(*job, timeout=BOUND_SECONDS).status

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=DELIVERIES) as pool:
            statuses = list(pool.map(one, plan))
        wall = time.monotonic() - started
        lines = [line for label in specs for line in delivery_lines(tmp_path / f"{label}.log")]
        # The platform retries what was refused: every event is then acknowledged, as done.
        for event in events:
            assert redeliver_until_acknowledged(instances[0], event, within=20)[0].acknowledged

    answers = Counter(statuses)
    kinds = Counter(str(line["outcome"]) for line in lines)
    print(
        f"\nstorm: {DELIVERIES} deliveries in {wall:.1f} s; answers {dict(answers)}; {dict(kinds)}"
    )
    assert wall < BOUND_SECONDS
    assert len(receiver.applied("/webhooks/default")) == EVENTS
    assert receiver.effects("/webhooks/default") == EVENTS
    assert len(lines) == DELIVERIES, "one log line per delivery"
    assert kinds["ran"] == EVENTS
    assert set(kinds) <= {"ran", "duplicate", "duplicate_cached", "lease_held"}
    assert set(answers) <= {200, 500}
    assert answers[500] == kinds["lease_held"], "every refusal is a LeaseHeld, and only those"
