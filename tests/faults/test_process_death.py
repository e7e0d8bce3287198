"""Process death at every step: SIGKILL of the function's whole process group, then redelivery.

Each crash server (`crash_functions.py`, one per function and step) stops at its step and is
killed there, with the delivery in flight: the platform got no answer and redelivers to a
fresh instance of the same function. Leases are 5 s (`SERVED_LEASE_SECONDS`), so a take-over
comes quickly.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from google.cloud import firestore

from demo.events import HttpEvent, pubsub_event
from demo.receiver import Receiver
from demo.serve import ServedFunction
from tests.faults.crash_functions import POINTS
from tests.faults.support import (
    CRASH_SOURCE,
    NO_ANSWER,
    PROJECT,
    SERVED_LEASE_SECONDS,
    Answer,
    Spec,
    crash_during,
    outcomes,
    publish_post,
    published_count,
    record,
    redeliver_until_acknowledged,
    serving,
    unique,
)

LEASE_SECONDS = SERVED_LEASE_SECONDS
LEASE_ENV = {"DEDUP_LEASE_SECONDS": str(LEASE_SECONDS)}
OUTSIDE = ("forward_webhook", "send_post_notification")
"""Lease mode, effect outside Firestore: an HTTP POST to the receiver with an Idempotency-Key."""
TRANSACTIONAL = "sync_published_count"
"""Transaction mode: the counter increment commits with the marker."""
OUTSIDE_THE_TRANSACTION = ("before_claim", "after_mark")
"""Crash points of transaction mode that hold no Firestore lock when the process dies."""
PATHS = {"forward_webhook": "/webhooks/default", "send_post_notification": "/notify"}


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("process-death")


@pytest.fixture(scope="module")
def servers(log_dir: Path) -> Iterator[dict[str, ServedFunction]]:
    """One crash server per (function, step), and one healthy server per function."""
    specs = {
        f"{name}-{point}": Spec(
            name,
            {**LEASE_ENV, "CRASH_AT": point, "CRASH_FILE": str(log_dir / f"{name}-{point}.crash")},
            CRASH_SOURCE,
        )
        for name in OUTSIDE
        for point in POINTS
    } | {
        f"{TRANSACTIONAL}-{point}": Spec(
            TRANSACTIONAL,
            {"CRASH_AT": point, "CRASH_FILE": str(log_dir / f"{TRANSACTIONAL}-{point}.crash")},
            CRASH_SOURCE,
        )
        for point in OUTSIDE_THE_TRANSACTION
    }
    specs |= {name: Spec(name, LEASE_ENV) for name in (*OUTSIDE, TRANSACTIONAL)}
    with serving(specs, log_dir) as served:
        yield served


def crash(servers: dict[str, ServedFunction], log_dir: Path, name: str, point: str,
          event: HttpEvent) -> Answer:  # fmt: skip
    """Deliver `event` to the crash server of (name, point) and kill it at that step."""
    label = f"{name}-{point}"
    return crash_during(servers[label], log_dir / f"{label}.crash", point, event)


OUTSIDE_EXPECTED = {
    # point: (record state right after the kill, POSTs right after the kill, POSTs in the end)
    "before_claim": (None, 0, 1),
    "after_claim": ("in_progress", 0, 1),
    "in_handler": ("in_progress", 0, 1),
    "after_effect": ("in_progress", 1, 2),
    "after_mark": ("sent", 1, 1),
}


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("name", OUTSIDE)
def test_outside_effect_survives_death_at_every_step(
    name: str,
    point: str,
    servers: dict[str, ServedFunction],
    log_dir: Path,
    receiver: Receiver,
    firestore_client: firestore.Client,
) -> None:
    """Killed at any step, the event ends with exactly one effect for an idempotent receiver:
    every POST of it carries the same Idempotency-Key. The only step after which the receiver
    gets a second POST is `after_effect` (effect done, "sent" not recorded); a live lease
    (`SERVED_LEASE_SECONDS`) holds redeliveries off with LeaseHeld until it expires."""
    event_id = f"{point}-{unique()}"
    if name == "forward_webhook":
        event = pubsub_event("webhooks", b'{"n": 1}', project=PROJECT, message_id=event_id)
        key = f"{event_id}-forward_webhook"
    else:
        event = publish_post(firestore_client, event_id)
        key = f"post-{event_id}-send_post_notification"
    path = PATHS[name]
    state_after_kill, posts_after_kill, posts_in_the_end = OUTSIDE_EXPECTED[point]

    killed = crash(servers, log_dir, name, point, event)

    assert killed.status == NO_ANSWER, "the killed delivery must not be acknowledged"
    left = record(firestore_client, key)
    assert (left or {}).get("state") == state_after_kill
    assert len(receiver.applied(path)) == posts_after_kill

    answers = redeliver_until_acknowledged(servers[name], event, within=LEASE_SECONDS + 15)

    final = record(firestore_client, key)
    assert final is not None
    assert final["state"] == "sent"
    posts = receiver.applied(path)
    assert len(posts) == posts_in_the_end
    assert {p.idempotency_key for p in posts} == {key}
    assert receiver.effects(path) == 1
    ran_again = point in ("after_claim", "in_handler", "after_effect")
    assert final["attempts"] == (2 if ran_again else 1)
    # The redeliveries refused before the lease expired are LeaseHeld, nothing else.
    logged = outcomes(log_dir / f"{name}.log", key)
    assert logged[-1] == ("duplicate" if point == "after_mark" else "ran")
    assert set(logged[:-1]) <= {"lease_held"}
    assert len(logged) == len(answers)
    if ran_again:  # the dead owner's lease held the first redelivery off
        assert logged[0] == "lease_held"


@pytest.mark.parametrize("point", OUTSIDE_THE_TRANSACTION)
def test_transactional_effect_has_no_window(
    point: str,
    servers: dict[str, ServedFunction],
    log_dir: Path,
    firestore_client: firestore.Client,
) -> None:
    """Transaction mode has no at-least-once window: killed before the transaction starts or
    after it committed, the counter moved if and only if the marker was written, and after
    redelivery it moved exactly once. (Killed inside the open transaction: see
    test_waiting_faults, since the dead transaction's lock holds redeliveries off ~60 s.)"""
    event = publish_post(firestore_client, f"{point}-{unique()}")
    key = f"{event.id}-{TRANSACTIONAL}"

    killed = crash(servers, log_dir, TRANSACTIONAL, point, event)

    assert killed.status == NO_ANSWER
    marker = record(firestore_client, key)
    counted = published_count(firestore_client)
    assert counted == (1 if point == "after_mark" else 0)
    assert (marker is not None and marker["state"] == "sent") == (counted == 1)

    redeliver_until_acknowledged(servers[TRANSACTIONAL], event, within=30)
    redeliver_until_acknowledged(servers[TRANSACTIONAL], event, within=10)

    assert published_count(firestore_client) == 1
    final = record(firestore_client, key)
    assert final is not None
    assert (final["state"], final["attempts"]) == ("sent", 1)
    logged = outcomes(log_dir / f"{TRANSACTIONAL}.log", key)
    first = "duplicate" if point == "after_mark" else "ran"
    assert logged[0] == first
    assert logged[1:] in (["duplicate"], ["duplicate_cached"])
