"""Async handlers under concurrency and crashes: 50 copies of one event in one event loop, a
SIGKILLed lease holder (the same kinds as the sync tests; 4 processes at once, each with its
own loop: `test_concurrency.test_four_processes_run_the_handler_once[*-async]`)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest
from google.cloud import firestore

from dedup import AsyncDeduplicator, AsyncDelivery, LeaseHeld, Mode, Outcome, Record, State
from tests.dedup.support import KILLED_LEASE_SECONDS, kill_inside_handler

MakeAsyncDedup = Callable[..., AsyncDeduplicator]
COPIES = 50
PROCESSES = 4
LEASE_SECONDS = KILLED_LEASE_SECONDS  # held off past a busy machine's pauses (support.py)


async def _gather(count: int, deliver: Callable[[], Awaitable[Outcome]]) -> Counter[str]:
    """Start `count` deliveries on this loop at once and tally outcomes and exceptions."""
    results = await asyncio.gather(*(deliver() for _ in range(count)), return_exceptions=True)
    tally: Counter[str] = Counter()
    for result in results:
        if isinstance(result, Outcome):
            tally[result.kind.value] += 1
        elif isinstance(result, LeaseHeld):
            tally["LeaseHeld"] += 1
        else:  # anything else is a bug the test must report
            tally[f"unexpected {type(result).__name__}: {result}"] += 1
    return tally


def _effects(client: firestore.Client) -> int:
    return sum(1 for _ in client.collection("effects").list_documents())


@pytest.mark.parametrize("shared", [True, False], ids=["one_instance", "fifty_instances"])
def test_fifty_copies_in_one_event_loop_lease_mode_run_the_handler_once(
    make_async_dedup: MakeAsyncDedup, firestore_client: firestore.Client, shared: bool
) -> None:
    """It is impossible for two of 50 concurrent deliveries in one event loop to both run the
    handler, whether they share an instance (turns, caches) or not (only Firestore decides);
    every other delivery is a duplicate or LeaseHeld, nothing else."""
    one = make_async_dedup()

    async def handler(delivery: AsyncDelivery) -> None:
        await delivery.client.collection("effects").document().create({"key": delivery.key})
        await asyncio.sleep(0.2)

    async def deliver() -> Outcome:
        return await (one if shared else make_async_dedup()).run("e1", "s", handler)

    tally = asyncio.run(_gather(COPIES, deliver))
    assert tally["ran"] == 1, tally
    assert set(tally) <= {"ran", "duplicate", "duplicate_cached", "LeaseHeld"}, tally
    assert _effects(firestore_client) == 1


@pytest.mark.parametrize("mode", [Mode.TRANSACTION, Mode.WRITE_ONLY])
def test_fifty_copies_in_one_event_loop_atomic_modes_commit_once(
    make_async_dedup: MakeAsyncDedup, firestore_client: firestore.Client, mode: Mode
) -> None:
    """Atomic modes: 50 concurrent deliveries (write-only: on 50 instances, so that they
    really race) increment the counter exactly once; every one returns normally."""
    counter = firestore_client.collection("counters").document("posts")
    one = make_async_dedup()

    async def handler(delivery: AsyncDelivery) -> None:
        ref = delivery.client.collection("counters").document("posts")
        if delivery.transaction is not None:
            await ref.get(transaction=delivery.transaction)
            delivery.transaction.set(ref, {"n": firestore.Increment(1)}, merge=True)
        else:
            assert delivery.batch is not None
            delivery.batch.set(ref, {"n": firestore.Increment(1)}, merge=True)

    async def deliver() -> Outcome:
        dedup = one if mode is Mode.TRANSACTION else make_async_dedup()
        return await dedup.run("e1", "s", handler, mode=mode)

    tally = asyncio.run(_gather(COPIES, deliver))
    assert tally["ran"] == 1, tally
    assert set(tally) <= {"ran", "duplicate", "duplicate_cached"}, tally
    assert counter.get().to_dict() == {"n": 1}


def test_a_sigkilled_async_lease_holder_is_taken_over_once_its_lease_ends(
    firestore_client: firestore.Client, make_async_dedup: MakeAsyncDedup
) -> None:
    """A process SIGKILLed inside its async handler holds redeliveries off (LeaseHeld) until
    its lease expires on the database clock; then exactly one redelivery runs the handler,
    as attempt 2, with the same key the killed one had."""
    kill_inside_handler("e1", "s", "--lease", str(LEASE_SECONDS), "--async")
    killed_at = time.monotonic()
    seen: list[tuple[str, int]] = []

    async def handler(delivery: AsyncDelivery) -> None:
        seen.append((delivery.key, delivery.attempt))

    async def redeliver() -> Outcome:
        with pytest.raises(LeaseHeld):
            await make_async_dedup().run("e1", "s", handler)
        while True:
            assert time.monotonic() - killed_at < LEASE_SECONDS + 10, "lease never expired"
            try:
                return await make_async_dedup().run("e1", "s", handler)
            except LeaseHeld:
                await asyncio.sleep(0.25)

    outcome = asyncio.run(redeliver())
    assert outcome.kind.value == "ran"
    killed = [d.to_dict() for d in firestore_client.collection("effects").stream()]
    assert [(e["key"], e["attempt"]) for e in killed if e] == [("e1-s", 1)]
    assert seen == [("e1-s", 2)]
    record = Record.from_snapshot(
        firestore_client.collection("triggerEvents").document("e1-s").get()
    )
    assert record is not None
    assert (record.state, record.attempts) == (State.SENT, 2)


@pytest.mark.parametrize("mode", [Mode.TRANSACTION, Mode.WRITE_ONLY])
def test_an_async_atomic_attempt_killed_before_its_commit_leaves_nothing(
    firestore_client: firestore.Client, make_async_dedup: MakeAsyncDedup, mode: Mode
) -> None:
    """An atomic-mode process SIGKILLed inside its async handler (writes buffered, commit not
    sent) leaves no effect and no record: the redelivery runs at once and commits once."""
    kill_inside_handler("e1", "s", "--mode", mode.value, "--async")
    assert _effects(firestore_client) == 0
    assert not firestore_client.collection("triggerEvents").document("e1-s").get().exists

    async def handler(delivery: AsyncDelivery) -> None:
        ref = delivery.client.collection("effects").document()
        writer = delivery.transaction if delivery.transaction is not None else delivery.batch
        assert writer is not None
        writer.create(ref, {"key": delivery.key})

    outcome = asyncio.run(make_async_dedup().run("e1", "s", handler, mode=mode))
    assert (outcome.kind.value, outcome.attempt) == ("ran", 1)
    assert _effects(firestore_client) == 1
