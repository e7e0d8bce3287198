"""Async handlers (`AsyncDeduplicator`, `trigger_once` on `async def`): every mode and every
guarantee of the sync path, on the emulator, one event loop per test (`asyncio.run`)."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.cloud import firestore
from google.cloud.firestore import AsyncClient, AsyncTransaction, AsyncWriteBatch

from dedup import (
    AsyncDeduplicator,
    AsyncDelivery,
    ConfigError,
    Deduplicator,
    Delivery,
    LeaseHeld,
    LeaseLost,
    Mode,
    OutcomeKind,
    PayloadMismatch,
    Record,
    State,
    SuffixRegistry,
    TerminalError,
    trigger_once,
)
from tests.dedup.support import STALE_LEASE_SECONDS, standing_clock, write_foreign_lease

MakeAsyncDedup = Callable[..., AsyncDeduplicator]
ReadRecord = Callable[[str], Record | None]
ATOMIC = [Mode.TRANSACTION, Mode.WRITE_ONLY]


class AsyncCalls:
    """An async handler that records its deliveries, writes `effects/<key>-<n>` the way its
    mode commits, and can fail or return a result on demand."""

    def __init__(self, error: Exception | None = None, result: Any = None) -> None:
        self.deliveries: list[AsyncDelivery] = []
        self.error = error
        self.result = result

    async def __call__(self, delivery: AsyncDelivery) -> Any:
        self.deliveries.append(delivery)
        ref = delivery.client.collection("effects").document()
        if delivery.transaction is not None:
            await ref.get(transaction=delivery.transaction)  # a transactional read, awaited
            delivery.transaction.create(ref, {"attempt": delivery.attempt})
        elif delivery.batch is not None:
            delivery.batch.create(ref, {"attempt": delivery.attempt})
        else:
            await ref.create({"attempt": delivery.attempt})
        await asyncio.sleep(0)
        if self.error is not None:
            raise self.error
        return self.result

    @property
    def count(self) -> int:
        return len(self.deliveries)


def effects(client: firestore.Client) -> int:
    """How many effects committed."""
    return sum(1 for _ in client.collection("effects").list_documents())


@pytest.mark.parametrize("mode", [Mode.LEASE, *ATOMIC])
def test_an_async_handler_runs_once_with_the_async_client_and_its_writer(
    make_async_dedup: MakeAsyncDedup,
    read_record: ReadRecord,
    firestore_client: firestore.Client,
    mode: Mode,
) -> None:
    """The first delivery awaits the handler with an AsyncClient (and, in the atomic modes, an
    AsyncTransaction or AsyncWriteBatch), records sent with its result; a redelivery on
    another instance is a duplicate that gets the stored result and runs nothing."""
    handler = AsyncCalls(result={"n": 7})

    async def scenario() -> None:
        first = await make_async_dedup().run("e1", "s", handler, mode=mode)
        assert (first.kind, first.attempt, first.result) == (OutcomeKind.RAN, 1, {"n": 7})
        again = await make_async_dedup().run("e1", "s", handler, mode=mode)
        assert (again.kind, again.result) == (OutcomeKind.DUPLICATE, {"n": 7})

    asyncio.run(scenario())
    # Write-only mode assumes the common case, no record: the duplicate calls the handler
    # into a batch whose commit the marker's create then refuses (nothing of it commits).
    assert handler.count == (2 if mode is Mode.WRITE_ONLY else 1)
    delivery = handler.deliveries[0]
    assert isinstance(delivery.client, AsyncClient)
    assert isinstance(delivery.transaction, AsyncTransaction) is (mode is Mode.TRANSACTION)
    assert isinstance(delivery.batch, AsyncWriteBatch) is (mode is Mode.WRITE_ONLY)
    assert (delivery.key, delivery.path) == ("e1-s", "triggerEvents/e1-s")
    record = read_record("e1-s")
    assert record is not None
    assert (record.state, record.attempts, record.mode, record.result) == (
        State.SENT,
        1,
        mode,
        {"n": 7},
    )
    assert not record.has_lease
    assert effects(firestore_client) == 1


@pytest.mark.parametrize("mode", [Mode.LEASE, *ATOMIC])
def test_a_failing_async_handler_is_retried_then_failed_or_dead(
    make_async_dedup: MakeAsyncDedup,
    read_record: ReadRecord,
    firestore_client: firestore.Client,
    mode: Mode,
) -> None:
    """A raising handler: the error reaches the platform, the attempt is counted (lease mode:
    the lease released), the atomic modes commit none of its writes; the retry runs as
    attempt 2; at max_attempts the record is dead; a TerminalError is failed at once."""

    async def scenario() -> None:
        with pytest.raises(RuntimeError, match="boom"):
            await make_async_dedup().run("e1", "s", AsyncCalls(RuntimeError("boom")), mode=mode)
        record = read_record("e1-s")
        assert record is not None
        assert (record.state, record.attempts, record.has_lease) == (State.IN_PROGRESS, 1, False)
        retry = AsyncCalls()
        assert (await make_async_dedup().run("e1", "s", retry, mode=mode)).kind is OutcomeKind.RAN
        assert retry.deliveries[-1].attempt == 2  # write-only: after a refused optimistic try

        poison = make_async_dedup(max_attempts=2, min_retry_seconds=0)
        with pytest.raises(RuntimeError):
            await poison.run("p1", "s", AsyncCalls(RuntimeError("poison")), mode=mode)
        dead = await poison.run("p1", "s", AsyncCalls(RuntimeError("poison")), mode=mode)
        assert (dead.kind, dead.attempt) == (OutcomeKind.DEAD, 2)

        failed = await make_async_dedup().run(
            "t1", "s", AsyncCalls(TerminalError("400")), mode=mode
        )
        assert failed.kind is OutcomeKind.FAILED
        skipped = AsyncCalls()
        assert (await make_async_dedup().run("t1", "s", skipped, mode=mode)).kind is (
            OutcomeKind.DUPLICATE
        )
        assert skipped.count == (1 if mode is Mode.WRITE_ONLY else 0)  # its try, uncommitted

    asyncio.run(scenario())
    states = {key: read_record(key) for key in ("e1-s", "p1-s", "t1-s")}
    assert {key: (r.state if r else None) for key, r in states.items()} == {
        "e1-s": State.SENT,
        "p1-s": State.DEAD,
        "t1-s": State.FAILED,
    }
    # Lease mode keeps the failed attempts' effects (they ran); atomic modes discard them.
    assert effects(firestore_client) == (5 if mode is Mode.LEASE else 1)


@pytest.mark.parametrize("finish", ["return", "raise"])
def test_a_stale_async_owner_gets_lease_lost(
    make_async_dedup: MakeAsyncDedup, read_record: ReadRecord, finish: str
) -> None:
    """Fencing: an owner whose lease expired and was taken over meanwhile gets LeaseLost on
    mark sent and on release; the record keeps the successor's outcome. The stale owner's
    clock stands still, its lease is 3 s, as in the sync test (test_lease.py says why)."""
    successor = AsyncCalls()

    async def slow(delivery: AsyncDelivery) -> None:
        await asyncio.sleep(STALE_LEASE_SECONDS + 0.5)  # past the lease on the database clock
        assert (await make_async_dedup().run("e1", "s", successor)).kind is OutcomeKind.RAN
        if finish == "raise":
            raise RuntimeError("late failure")

    async def scenario() -> None:
        stale = make_async_dedup(lease_seconds=STALE_LEASE_SECONDS, budget_clock=standing_clock)
        with pytest.raises(LeaseLost, match="took it over"):
            await stale.run("e1", "s", slow)

    asyncio.run(scenario())
    assert successor.deliveries[0].attempt == 2
    record = read_record("e1-s")
    assert record is not None
    assert (record.state, record.attempts, record.last_error) == (State.SENT, 2, None)


def test_live_leases_expired_leases_and_poison_are_judged_like_the_sync_path(
    make_async_dedup: MakeAsyncDedup, firestore_client: firestore.Client
) -> None:
    """Another owner's live lease: LeaseHeld, the atomic modes wait for it too; an expired
    one is taken over as attempt 2; an expired one with no attempts left is buried, unrun."""
    write_foreign_lease(firestore_client, "live-s", started=firestore.SERVER_TIMESTAMP)
    long_ago = datetime.now(UTC) - timedelta(minutes=10)
    write_foreign_lease(firestore_client, "old-s", started=long_ago)
    write_foreign_lease(firestore_client, "poison-s", started=long_ago, attempts=3)
    handler = AsyncCalls()

    async def scenario() -> None:
        for mode in (Mode.LEASE, *ATOMIC):
            with pytest.raises(LeaseHeld):
                await make_async_dedup().run("live", "s", handler, mode=mode)
        taken = await make_async_dedup().run("old", "s", handler)
        assert (taken.kind, taken.attempt) == (OutcomeKind.RAN, 2)
        buried = await make_async_dedup(max_attempts=3, min_retry_seconds=0).run(
            "poison", "s", handler
        )
        assert buried.kind is OutcomeKind.DEAD

    asyncio.run(scenario())
    # Only write-only mode called the handler for the leased key (its batch never committed).
    live = [d for d in handler.deliveries if d.key == "live-s"]
    assert all(d.batch is not None for d in live)
    assert [d.key for d in handler.deliveries if d.key != "live-s"] == ["old-s"]
    assert effects(firestore_client) == 1


def test_payload_age_self_trigger_and_cache_checks_hold(
    make_async_dedup: MakeAsyncDedup, caplog: pytest.LogCaptureFixture
) -> None:
    """A reused id with another payload raises PayloadMismatch under that policy; a too-old
    event and an event about a dedup record are dropped unrun; a key known sent is answered
    from the instance's cache."""
    handler = AsyncCalls()

    async def scenario() -> None:
        dedup = make_async_dedup(on_payload_mismatch="raise", max_event_age_seconds=60)
        assert (await dedup.run("e1", "s", handler, payload=b"one")).kind is OutcomeKind.RAN
        cached = await dedup.run("e1", "s", handler, payload=b"one")
        assert cached.kind is OutcomeKind.DUPLICATE_CACHED
        with pytest.raises(PayloadMismatch):
            await make_async_dedup(on_payload_mismatch="raise").run(
                "e1", "s", handler, payload=b"two"
            )
        old = datetime.now(UTC) - timedelta(hours=1)
        assert (await dedup.run("e2", "s", handler, event_time=old)).kind is OutcomeKind.TOO_OLD
        own = await dedup.run("e3", "s", handler, document_path="triggerEvents/e1-s")
        assert own.kind is OutcomeKind.SELF_TRIGGER

    with caplog.at_level(logging.INFO, logger="dedup"):
        asyncio.run(scenario())
    assert handler.count == 1
    outcomes = [getattr(r, "outcome", None) for r in caplog.records]
    assert {"ran", "duplicate_cached", "payload_mismatch", "too_old", "self_trigger"} <= set(
        outcomes
    )


def test_each_front_door_refuses_the_other_kind_of_handler(
    make_async_dedup: MakeAsyncDedup,
) -> None:
    """A `def` handler given to AsyncDeduplicator, or an `async def` one to Deduplicator (whose
    coroutine would never be awaited), is refused before any record is written."""

    def sync_handler(delivery: Delivery) -> None:  # pragma: no cover - refused
        raise AssertionError

    async def async_handler(delivery: AsyncDelivery) -> None:  # pragma: no cover - refused
        raise AssertionError

    with pytest.raises(ConfigError, match="Deduplicator"):
        asyncio.run(make_async_dedup().run("e1", "s", sync_handler))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="AsyncDeduplicator"):
        Deduplicator().run("e1", "s", async_handler)  # type: ignore[arg-type]


def test_trigger_once_makes_an_async_def_handler_an_async_function(
    make_async_dedup: MakeAsyncDedup, firestore_client: firestore.Client
) -> None:
    """`trigger_once` on an `async def` handler returns an `async def fn(event)` (what
    functions_framework.aio.cloud_event awaits) with the handler's name; run twice with one
    event it runs the handler once. A sync Deduplicator for it is refused at decoration."""
    from cloudevents.http import CloudEvent

    registry = SuffixRegistry()
    seen: list[str] = []

    @trigger_once("asyncHandler", deduplicator=make_async_dedup(), registry=registry)
    async def handle(event: Any, delivery: AsyncDelivery) -> None:
        """Docs."""
        seen.append(delivery.key)
        await delivery.client.collection("effects").document(delivery.key).create({})

    assert inspect.iscoroutinefunction(handle)
    assert (handle.__name__, handle.__doc__) == ("handle", "Docs.")
    assert len(inspect.signature(handle).parameters) == 1
    event = CloudEvent({"id": "ce-1", "source": "//t", "type": "com.example.t"}, {"x": 1})

    async def scenario() -> tuple[object, object]:
        return await asyncio.gather(handle(event), handle(event), return_exceptions=True)

    # The copy arrives while the first holds the lease: LeaseHeld, the platform retries it.
    first, copy = asyncio.run(scenario())
    assert first is None
    assert isinstance(copy, LeaseHeld)
    asyncio.run(handle(event))  # the platform's retry of the copy: a duplicate
    assert seen == ["ce-1-asyncHandler"]
    assert effects(firestore_client) == 1

    async def other(event: Any, delivery: AsyncDelivery) -> None:  # pragma: no cover
        raise AssertionError

    with pytest.raises(ConfigError, match="AsyncDeduplicator"):
        trigger_once("wrongKind", deduplicator=Deduplicator(), registry=registry)(other)
