"""Async handlers when Firestore fails: lost responses, errors, a whole outage, through a gRPC
fault interceptor on the AsyncClient's asyncio channel (`tests.dedup.aio_faults`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest
from google.cloud import firestore

from dedup import AsyncDelivery, Mode, OutcomeKind, Record, State, StoreUnavailable
from tests.dedup.aio_faults import faulty_async_dedup
from tests.dedup.grpc_faults import Fault, commits_cut_rollbacks_refused, nth

ReadRecord = Callable[[str], Record | None]
ATOMIC = [Mode.TRANSACTION, Mode.WRITE_ONLY]


class Counting:
    """An async handler that counts its calls and increments `counters/c` the way its mode
    commits (lease mode: a plain write)."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, delivery: AsyncDelivery) -> None:
        self.calls += 1
        ref = delivery.client.collection("counters").document("c")
        writer = delivery.transaction if delivery.transaction is not None else delivery.batch
        if writer is None:
            await ref.set({"n": firestore.Increment(1)}, merge=True)
        else:
            writer.set(ref, {"n": firestore.Increment(1)}, merge=True)


def _counter(client: firestore.Client) -> dict[str, object] | None:
    return client.collection("counters").document("c").get().to_dict()


@pytest.mark.parametrize("fault", [Fault.ABORT, Fault.DEADLINE, Fault.LOSE_RESPONSE])
def test_store_errors_on_mark_sent_are_retried_not_reported(
    fault: Fault, read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """Async: when "sent" fails after the handler ran (contention, a deadline, a
    lost response), the delivery keeps trying until it is recorded (the write is fenced), so
    no copy runs the effect again. Commit 1 is the claim, 2 the handler's write."""
    dedup = faulty_async_dedup(nth("Commit", {3, 4, 5}, fault))
    handler = Counting()
    outcome = asyncio.run(dedup.run("e1", "s", handler))
    assert (outcome.kind, handler.calls) == (OutcomeKind.RAN, 1)
    assert read_record("e1-s").state is State.SENT  # type: ignore[union-attr]
    assert _counter(firestore_client) == {"n": 1}


def test_a_lost_claim_response_is_the_deliverys_own_claim(read_record: ReadRecord) -> None:
    """The claim's create is applied but its response lost: the delivery recognises its own
    lease by its owner token and runs the handler, instead of waiting on itself."""
    dedup = faulty_async_dedup(nth("Commit", {1}, Fault.LOSE_RESPONSE))
    handler = Counting()
    outcome = asyncio.run(dedup.run("e1", "s", handler))
    assert (outcome.kind, outcome.attempt, handler.calls) == (OutcomeKind.RAN, 1, 1)
    assert read_record("e1-s").state is State.SENT  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ATOMIC)
def test_a_lost_commit_response_is_the_attempts_own_commit(
    mode: Mode, read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """Atomic-mode commit classification: a commit applied with its response lost is
    recognised by the marker's token (ran, effect once); an expired transaction
    (INVALID_ARGUMENT) and contention (ABORTED) are tried again, never counted as failures."""
    for fault, event in ((Fault.LOSE_RESPONSE, "e1"), (Fault.INVALID, "e2"), (Fault.ABORT, "e3")):
        handler = Counting()
        dedup = faulty_async_dedup(nth("Commit", {1}, fault))
        outcome = asyncio.run(dedup.run(event, "s", handler, mode=mode))
        assert outcome.kind is OutcomeKind.RAN, fault
        record = read_record(f"{event}-s")
        assert record is not None
        assert (record.state, record.attempts) == (State.SENT, 1), fault
    assert _counter(firestore_client) == {"n": 3}


@pytest.mark.parametrize("mode", [Mode.LEASE, *ATOMIC])
def test_an_outage_is_store_unavailable_then_the_event_runs_once(
    mode: Mode,
    read_record: ReadRecord,
    firestore_client: firestore.Client,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """While every write fails, a delivery raises StoreUnavailable (logged `unavailable`, the
    platform retries) within its RPC timeout, and no effect commits in the atomic modes;
    once Firestore is back, the redelivery runs the handler and the event ends sent, once."""
    down = faulty_async_dedup(lambda method, n: Fault.DEADLINE, rpc_timeout_seconds=2)
    handler = Counting()
    with caplog.at_level(logging.WARNING, logger="dedup"), pytest.raises(StoreUnavailable):
        asyncio.run(down.run("e1", "s", handler, mode=mode))
    assert "unavailable" in {getattr(r, "outcome", None) for r in caplog.records}
    if mode is not Mode.LEASE:
        assert _counter(firestore_client) is None
    back = faulty_async_dedup(lambda method, n: Fault.PASS)
    assert asyncio.run(back.run("e1", "s", handler, mode=mode)).kind is OutcomeKind.RAN
    assert asyncio.run(back.run("e1", "s", handler, mode=mode)).kind is (
        OutcomeKind.DUPLICATE_CACHED
    )
    assert read_record("e1-s").state is State.SENT  # type: ignore[union-attr]
    assert _counter(firestore_client) == {"n": 1}


async def _write_in_step(transaction: object, delivery: AsyncDelivery) -> None:
    """A transactional step that reads one document (beginning the transaction) and creates
    another: a transaction left open by a refused rollback holds no lock the next needs."""
    await delivery.client.collection("probes").document(delivery.key).get(transaction=transaction)
    effect = delivery.client.collection("counters").document(delivery.key)
    transaction.create(effect, {"key": delivery.key})  # type: ignore[attr-defined]


async def _step_handler(delivery: AsyncDelivery) -> None:
    await delivery.step("write", _write_in_step, delivery, transactional=True)


def test_a_refused_rollback_never_stands_for_a_steps_failed_commit(
    read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """The async twin of `tests/dedup/test_holes.py`'s test of that name: a step's commit cut
    off unsent, its rollback refused as invalid, is released for the platform's retry (not
    recorded `failed`), and the next delivery commits the step's write once."""

    plan = commits_cut_rollbacks_refused({2, 3})
    with pytest.raises(Exception, match="deadline exceeded"):
        asyncio.run(faulty_async_dedup(plan, min_retry_seconds=0).run("e1", "s", _step_handler))
    assert read_record("e1-s").state is State.IN_PROGRESS  # type: ignore[union-attr]
    back = faulty_async_dedup(lambda method, n: Fault.PASS, min_retry_seconds=0)
    assert asyncio.run(back.run("e1", "s", _step_handler)).kind is OutcomeKind.RAN
    assert read_record("e1-s").state is State.SENT  # type: ignore[union-attr]
    assert firestore_client.collection("counters").document("e1-s").get().exists
