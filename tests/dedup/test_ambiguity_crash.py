"""Lease mode's window, for real: the effect reaches a receiver that does not deduplicate
(every call is a document in `effects`), then "sent" is never written. Either the process is
SIGKILLed right after the handler returned (`Step.AFTER_EFFECT`, a separate worker process),
or the store fails on every write after the claim until the delivery gives its lease up
(`StoreUnavailable`). A redelivery after the lease expired is ambiguous; each choice must end
as documented (docs/guarantees.md), on the sync and the async path:

* `reconcile` asking the receiver: exactly one effect, the record sent with `reconciled`;
* `on_ambiguous="skip"`: at most one effect (here exactly the killed one), the record unknown;
* by default ("rerun"): two effects under one key.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from google.cloud import firestore

from dedup import (
    AsyncDelivery,
    DedupConfig,
    Deduplicator,
    Delivery,
    LeaseHeld,
    Outcome,
    OutcomeKind,
    Record,
    State,
    StoreUnavailable,
)
from tests.dedup.aio_faults import faulty_async_dedup
from tests.dedup.conftest import EFFECTS, MakeAsyncDedup, MakeDedup
from tests.dedup.grpc_faults import Fault, Plan, faulty_client
from tests.dedup.support import kill_when_started, standing_clock

LEASE_SECONDS = 2
"""Every delivery here runs on `standing_clock` (tests/dedup/support.py): a 2 s lease leaves a
delivery 1.8 s on its own clock from its claim to its handler, which a busy machine may take,
and the delivery would give the lease back (BudgetSpent) instead of ending as the test asks.
The lease is judged by Firestore, on the database clock, which the test waits out."""
SUFFIX = "s"
EVENT = "e1"
KEY = "e1-s"
CHOICES = ("reconcile", "skip", "rerun")
PATHS = ("sync", "async")
WINDOWS = ("sigkill", "store")


def after_the_claim(method: str, n: int) -> Fault:
    """The store fails every commit after the claim (the first): "sent" is never written."""
    return Fault.DEADLINE if method == "Commit" and n > 1 else Fault.PASS


def effects(client: firestore.Client) -> list[dict[str, Any]]:
    """Every call the receiver got (it counts them all: it does not deduplicate)."""
    found = (d.to_dict() for d in client.collection(EFFECTS).stream())
    return [e for e in found if e]


def asked(effect_filter: firestore.FieldFilter, client: firestore.Client) -> bool:
    return bool(client.collection(EFFECTS).where(filter=effect_filter).limit(1).get())


def receiver_filter(delivery: Any) -> firestore.FieldFilter:
    """How reconcile asks the receiver: by the message id the earlier attempt noted, else by
    the key (the store-error variant notes nothing: its note would fail too)."""
    message_id = delivery.notes.get("messageId")
    if message_id is not None:
        return firestore.FieldFilter("messageId", "==", message_id)
    return firestore.FieldFilter("key", "==", delivery.key)


def options(choice: str, reconcile: Any) -> dict[str, Any]:
    if choice == "reconcile":
        return {"reconcile": reconcile}
    if choice == "skip":
        return {"on_ambiguous": "skip"}
    return {}


class HeldUntilStarted:
    """A budget clock that reads 0 until `start()`, then the real seconds since: the delivery
    reaches its handler whatever the machine's load (`standing_clock`'s reason), then its
    failing writes after the handler give up within the lease's 2 s of real time, as on a
    real clock (on a clock that never moved they would be retried without end)."""

    def __init__(self) -> None:
        self._started: float | None = None

    def start(self) -> None:
        if self._started is None:
            self._started = time.monotonic()

    def __call__(self) -> float:
        return 0.0 if self._started is None else time.monotonic() - self._started


def leave_the_window(window: str, path: str, client: firestore.Client) -> None:
    """One delivery produces the effect and never records "sent"."""
    if window == "sigkill":
        args = (EVENT, SUFFIX, "--lease", str(LEASE_SECONDS), "--die-after-effect", "--note")
        kill_when_started(*args, *(("--async",) if path == "async" else ()))
        return

    clock = HeldUntilStarted()

    def handler(delivery: Delivery) -> None:
        clock.start()
        client.collection(EFFECTS).document().create({"key": delivery.key})

    async def async_handler(delivery: AsyncDelivery) -> None:
        clock.start()
        client.collection(EFFECTS).document().create({"key": delivery.key})

    settings: dict[str, Any] = {
        "lease_seconds": LEASE_SECONDS,
        "rpc_timeout_seconds": 1,
        "budget_clock": clock,
    }
    plan: Plan = after_the_claim
    if path == "sync":
        broken = Deduplicator(DedupConfig(**settings), client=faulty_client(plan))
        with pytest.raises(StoreUnavailable):
            broken.run(EVENT, SUFFIX, handler)
        return
    with pytest.raises(StoreUnavailable):
        asyncio.run(faulty_async_dedup(plan, **settings).run(EVENT, SUFFIX, async_handler))


def until_taken_over(deliver: Callable[[], Outcome]) -> Outcome:
    """Redeliver like the platform until the lease has expired and a delivery ends."""
    deadline = time.monotonic() + LEASE_SECONDS + 15
    while True:
        try:
            return deliver()
        except LeaseHeld:
            assert time.monotonic() < deadline, "the lease never expired"
            time.sleep(0.25)


def redeliver(
    path: str,
    choice: str,
    client: firestore.Client,
    make_dedup: MakeDedup,
    make_async_dedup: MakeAsyncDedup,
    ran: list[str],
) -> Outcome:
    """The redelivery after the lease expired, with `choice`, on `path`."""
    if path == "sync":

        def handler(delivery: Delivery) -> None:
            ran.append(delivery.key)
            client.collection(EFFECTS).document().create({"key": delivery.key})

        def reconcile(delivery: Delivery) -> bool | None:
            return asked(receiver_filter(delivery), client)

        return until_taken_over(
            lambda: make_dedup(lease_seconds=LEASE_SECONDS, budget_clock=standing_clock).run(
                EVENT, SUFFIX, handler, **options(choice, reconcile)
            )
        )

    async def async_handler(delivery: AsyncDelivery) -> None:
        ran.append(delivery.key)
        await delivery.client.collection(EFFECTS).document().create({"key": delivery.key})

    async def async_reconcile(delivery: AsyncDelivery) -> bool | None:
        query = delivery.client.collection(EFFECTS).where(filter=receiver_filter(delivery))
        return bool(await query.limit(1).get())

    def deliver() -> Outcome:
        run: Awaitable[Outcome] = make_async_dedup(
            lease_seconds=LEASE_SECONDS, budget_clock=standing_clock
        ).run(EVENT, SUFFIX, async_handler, **options(choice, async_reconcile))
        return asyncio.run(run)  # type: ignore[arg-type]

    return until_taken_over(deliver)


@pytest.mark.parametrize("choice", CHOICES)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("window", WINDOWS)
def test_the_ambiguous_delivery_ends_as_chosen(
    window: str,
    path: str,
    choice: str,
    firestore_client: firestore.Client,
    make_dedup: MakeDedup,
    make_async_dedup: MakeAsyncDedup,
) -> None:
    """reconcile: exactly one effect, sent and reconciled; skip: at most one, unknown, and no
    later delivery runs it; rerun: two effects under one key, sent."""
    leave_the_window(window, path, firestore_client)
    assert [e["key"] for e in effects(firestore_client)] == [KEY], "the effect reached the receiver"
    before = Record.from_snapshot(firestore_client.collection("triggerEvents").document(KEY).get())
    assert before is not None
    assert (before.state, before.has_lease) == (State.IN_PROGRESS, True)
    if window == "sigkill":
        assert before.notes is not None
        assert "messageId" in before.notes

    ran: list[str] = []
    outcome = redeliver(path, choice, firestore_client, make_dedup, make_async_dedup, ran)
    record = Record.from_snapshot(firestore_client.collection("triggerEvents").document(KEY).get())
    assert record is not None
    got = effects(firestore_client)
    if choice == "reconcile":
        assert outcome.kind is OutcomeKind.RECONCILED
        assert len(got) == 1
        assert ran == []
        assert (record.state, record.reconciled) == (State.SENT, True)
    elif choice == "skip":
        assert outcome.kind is OutcomeKind.AMBIGUOUS
        assert len(got) <= 1
        assert ran == []
        assert (record.state, record.sent, record.reconciled) == (State.UNKNOWN, False, False)
        again = make_dedup(lease_seconds=LEASE_SECONDS, budget_clock=standing_clock).run(
            EVENT, SUFFIX, lambda d: ran.append(d.key), on_ambiguous="skip"
        )
        assert again.kind is OutcomeKind.DUPLICATE
        assert ran == []
    else:
        assert outcome.kind is OutcomeKind.RAN
        assert [e["key"] for e in got] == [KEY, KEY]
        assert ran == [KEY]
        assert (record.state, record.reconciled) == (State.SENT, False)
