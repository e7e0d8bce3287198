"""Lease mode: every claim condition and transition of a record, one delivery at a time."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from google.cloud import firestore

from dedup import (
    Deduplicator,
    Delivery,
    LeaseHeld,
    LeaseLost,
    Mode,
    OutcomeKind,
    PayloadMismatch,
    Record,
    State,
    TerminalError,
    dedup_key,
)
from dedup.kernel.run import SentKeys
from tests.dedup.support import STALE_LEASE_SECONDS, standing_clock, write_foreign_lease

MakeDedup = Callable[..., Deduplicator]
ReadRecord = Callable[[str], Record | None]


class Calls:
    """A handler that counts its calls and can fail on demand."""

    def __init__(self, error: Exception | None = None) -> None:
        self.deliveries: list[Delivery] = []
        self.error = error

    def __call__(self, delivery: Delivery) -> None:
        self.deliveries.append(delivery)
        if self.error is not None:
            raise self.error

    @property
    def count(self) -> int:
        return len(self.deliveries)


def test_fresh_event_runs_once_and_is_recorded_sent(
    make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """record_absent: the handler runs with attempt 1; the record ends sent, lease dropped."""
    handler = Calls()
    outcome = make_dedup().run("e1", "s", handler, payload=b"p")
    assert (outcome.kind, outcome.attempt, outcome.key) == (OutcomeKind.RAN, 1, "e1-s")
    delivery = handler.deliveries[0]
    assert (delivery.key, delivery.event_id, delivery.suffix, delivery.attempt) == (
        "e1-s",
        "e1",
        "s",
        1,
    )
    assert delivery.path == "triggerEvents/e1-s"
    assert delivery.transaction is None
    assert delivery.batch is None
    record = read_record("e1-s")
    assert record is not None
    assert record.state is State.SENT
    assert record.sent
    assert record.owner is not None  # the token of the attempt that wrote the outcome
    assert record.lease_started_at is None
    assert not record.has_lease
    assert record.attempts == 1
    assert record.event_id == "e1"
    assert record.suffix == "s"
    assert record.mode is Mode.LEASE
    assert record.sent_at is not None
    assert record.first_attempt_at is not None
    assert record.payload_hash is not None
    assert record.expire_at is not None
    assert record.expire_at - datetime.now(UTC) > timedelta(days=6)


def test_sent_record_is_a_duplicate(make_dedup: MakeDedup) -> None:
    """record_sent: another instance skips the handler and returns normally."""
    make_dedup().run("e1", "s", Calls())
    handler = Calls()
    assert make_dedup().run("e1", "s", handler).kind is OutcomeKind.DUPLICATE
    assert handler.count == 0


def test_cached_duplicate_costs_no_round_trip(
    make_dedup: MakeDedup, firestore_client: firestore.Client
) -> None:
    """A key this instance saw finish is answered from its LRU, without reading Firestore."""
    dedup = make_dedup()
    dedup.run("e1", "s", Calls())
    firestore_client.collection("triggerEvents").document("e1-s").delete()
    handler = Calls()
    assert dedup.run("e1", "s", handler).kind is OutcomeKind.DUPLICATE_CACHED
    assert handler.count == 0


def test_live_lease_of_another_owner_raises_lease_held(make_dedup: MakeDedup) -> None:
    """lease_live_other_owner: a redelivery during a live run raises LeaseHeld, runs nothing."""
    inner = Calls()
    seen: list[BaseException] = []

    def outer(delivery: Delivery) -> None:
        try:
            make_dedup().run("e1", "s", inner)
        except LeaseHeld as exc:
            seen.append(exc)

    assert make_dedup().run("e1", "s", outer).kind is OutcomeKind.RAN
    assert len(seen) == 1
    assert "triggerEvents/e1-s" in str(seen[0])
    assert inner.count == 0


def test_released_lease_is_taken_over(make_dedup: MakeDedup, read_record: ReadRecord) -> None:
    """A failing handler releases the lease and re-raises; the retry runs as attempt 2."""
    with pytest.raises(RuntimeError, match="boom"):
        make_dedup().run("e1", "s", Calls(RuntimeError("boom")))
    record = read_record("e1-s")
    assert record is not None
    assert (record.state, record.has_lease, record.attempts) == (State.IN_PROGRESS, False, 1)
    assert record.last_error == "RuntimeError: boom"
    handler = Calls()
    outcome = make_dedup().run("e1", "s", handler)
    assert (outcome.kind, outcome.attempt, handler.deliveries[0].attempt) == (
        OutcomeKind.RAN,
        2,
        2,
    )


def test_expired_lease_is_taken_over(
    make_dedup: MakeDedup, read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """lease_expired: a run that died 10 minutes ago (60 s lease) is taken over, attempts + 1."""
    write_foreign_lease(firestore_client, "e1-s", started=datetime.now(UTC) - timedelta(minutes=10))
    handler = Calls()
    assert make_dedup().run("e1", "s", handler).kind is OutcomeKind.RAN
    assert handler.deliveries[0].attempt == 2
    record = read_record("e1-s")
    assert record is not None
    assert (record.state, record.attempts) == (State.SENT, 2)


def test_terminal_error_is_recorded_failed_and_not_retried(
    make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """TerminalError: outcome failed, returned normally; record_finished skips redeliveries."""
    outcome = make_dedup().run("e1", "s", Calls(TerminalError("HTTP 400 from receiver")))
    assert outcome.kind is OutcomeKind.FAILED
    record = read_record("e1-s")
    assert record is not None
    assert record.state is State.FAILED
    assert record.last_error == "TerminalError: HTTP 400 from receiver"
    handler = Calls()
    assert make_dedup().run("e1", "s", handler).kind is OutcomeKind.DUPLICATE
    assert handler.count == 0


def test_last_allowed_attempt_failing_makes_the_record_dead(
    make_dedup: MakeDedup, read_record: ReadRecord, caplog: pytest.LogCaptureFixture
) -> None:
    """At max_attempts a failing handler is recorded dead, returns normally, logs ERROR."""
    with pytest.raises(RuntimeError):
        make_dedup(max_attempts=2, min_retry_seconds=0).run("e1", "s", Calls(RuntimeError("boom")))
    with caplog.at_level(logging.INFO, logger="dedup"):
        outcome = make_dedup(max_attempts=2, min_retry_seconds=0).run(
            "e1", "s", Calls(RuntimeError("boom"))
        )
    assert (outcome.kind, outcome.attempt) == (OutcomeKind.DEAD, 2)
    record = read_record("e1-s")
    assert record is not None
    assert record.state is State.DEAD
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors
    assert "triggerEvents/e1-s" in errors[0].getMessage()
    handler = Calls()
    assert (
        make_dedup(max_attempts=2, min_retry_seconds=0).run("e1", "s", handler).kind
        is OutcomeKind.DUPLICATE
    )
    assert handler.count == 0


def test_poison_event_that_crashes_is_buried_on_takeover(
    make_dedup: MakeDedup, read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """attempts_exhausted: an expired lease with no attempts left becomes dead, no run."""
    write_foreign_lease(
        firestore_client, "e1-s", started=datetime.now(UTC) - timedelta(minutes=10), attempts=3
    )
    handler = Calls()
    assert (
        make_dedup(max_attempts=3, min_retry_seconds=0).run("e1", "s", handler).kind
        is OutcomeKind.DEAD
    )
    assert handler.count == 0
    record = read_record("e1-s")
    assert record is not None
    assert record.state is State.DEAD


@pytest.mark.parametrize("finish", ["return", "raise"])
def test_stale_owner_cannot_mark_sent_or_release(
    make_dedup: MakeDedup, read_record: ReadRecord, finish: str
) -> None:
    """Fencing: an owner whose lease expired and was taken over gets LeaseLost on mark sent
    and on release; the record keeps the new owner's result.

    The stale owner's instance clock stands still (`standing_clock`): on a busy machine its
    own clock would count the lease ended before the handler starts, or cut its last write to
    a tenth of a second, and the test would see BudgetSpent or StoreUnavailable instead of the
    fence. Each of its writes gets the whole lease (3 s) for one RPC; the lease itself expires
    on the database clock, which the handler's sleep passes whatever the load."""
    successor = Calls()

    def slow(delivery: Delivery) -> None:
        time.sleep(STALE_LEASE_SECONDS + 0.5)  # past the lease on the database clock
        assert make_dedup().run("e1", "s", successor).kind is OutcomeKind.RAN
        if finish == "raise":
            raise RuntimeError("late failure")

    stale = make_dedup(lease_seconds=STALE_LEASE_SECONDS, budget_clock=standing_clock)
    with pytest.raises(LeaseLost, match="took it over"):
        stale.run("e1", "s", slow)
    assert successor.deliveries[0].attempt == 2
    record = read_record("e1-s")
    assert record is not None
    assert (record.state, record.attempts, record.last_error) == (State.SENT, 2, None)


def test_payload_mismatch_is_logged_and_treated_as_duplicate(
    make_dedup: MakeDedup, caplog: pytest.LogCaptureFixture
) -> None:
    """Same key, different payload: reported at ERROR, handled as the recorded event."""
    make_dedup().run("e1", "s", Calls(), payload=b"first")
    handler = Calls()
    with caplog.at_level(logging.INFO, logger="dedup"):
        outcome = make_dedup().run("e1", "s", handler, payload=b"second")
    assert outcome.kind is OutcomeKind.DUPLICATE
    assert handler.count == 0
    assert any(
        r.levelno == logging.ERROR and "payload fingerprint differs" in r.getMessage()
        for r in caplog.records
    )


def test_payload_mismatch_raises_when_configured(make_dedup: MakeDedup) -> None:
    """on_payload_mismatch='raise': PayloadMismatch instead of a duplicate."""
    make_dedup().run("e1", "s", Calls(), payload=b"first")
    with pytest.raises(PayloadMismatch, match="different event"):
        make_dedup(on_payload_mismatch="raise").run("e1", "s", Calls(), payload=b"second")


def test_too_old_event_is_dropped(make_dedup: MakeDedup, read_record: ReadRecord) -> None:
    """An event older than max_event_age_seconds is not run and leaves no record."""
    handler = Calls()
    old = datetime.now(UTC) - timedelta(minutes=2)
    outcome = make_dedup(max_event_age_seconds=60).run("e1", "s", handler, event_time=old)
    assert outcome.kind is OutcomeKind.TOO_OLD
    assert handler.count == 0
    assert read_record("e1-s") is None
    recent = datetime.now(UTC) - timedelta(seconds=5)
    assert make_dedup(max_event_age_seconds=60).run("e1", "s", handler, event_time=recent).kind == (
        OutcomeKind.RAN
    )


@pytest.mark.parametrize(
    "path",
    [
        "triggerEvents/x-s",
        "/triggerEvents/x-s",
        "projects/p/databases/(default)/documents/triggerEvents/x",
    ],
)
def test_event_about_a_dedup_record_is_a_self_trigger(
    make_dedup: MakeDedup, read_record: ReadRecord, path: str
) -> None:
    """Events about the dedup collection's own documents are ignored: no run, no record."""
    handler = Calls()
    assert make_dedup().run("e1", "s", handler, document_path=path).kind is OutcomeKind.SELF_TRIGGER
    assert handler.count == 0
    assert read_record("e1-s") is None
    assert make_dedup().run("e1", "s", handler, document_path="triggerEventsX/a").kind is (
        OutcomeKind.RAN
    )


def test_lru_is_bounded() -> None:
    """The finished-key cache never holds more than its capacity; the oldest goes first."""
    cache = SentKeys(2)
    for key in ("a", "b", "c"):
        cache.add(key, None)
    assert len(cache) == 2
    assert "a" not in cache
    assert "c" in cache
    disabled = SentKeys(0)
    disabled.add("a", None)
    assert len(disabled) == 0


def test_deduplicator_cache_is_bounded(make_dedup: MakeDedup) -> None:
    """A Deduplicator remembers at most cache_size sent keys."""
    dedup = make_dedup(cache_size=2)
    for event_id in ("a", "b", "c"):
        dedup.run(event_id, "s", Calls())
    assert len(dedup.sent_keys) == 2


def test_client_is_created_lazily_once(firestore_client: firestore.Client) -> None:
    """Constructing a Deduplicator touches no network; the client is built once, on first use."""
    from dedup import DedupConfig, Deduplicator

    built: list[int] = []

    def factory() -> firestore.Client:
        built.append(1)
        return firestore_client

    dedup = Deduplicator(DedupConfig(), client_factory=factory)
    assert built == []
    dedup.run("e1", "s", Calls())
    dedup.run("e2", "s", Calls())
    assert built == [1]


def test_key_matches_dedup_key(make_dedup: MakeDedup) -> None:
    """The outcome and delivery key are dedup_key(event_id, suffix), mapped ids included."""
    handler = Calls()
    outcome = make_dedup().run("a/b", "s", handler)
    assert outcome.key == handler.deliveries[0].key == dedup_key("a/b", "s")
