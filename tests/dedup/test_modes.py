"""Transaction and write-only modes: the effect and the marker commit together."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from google.cloud import firestore

from dedup import Deduplicator, Delivery, Mode, OutcomeKind, Record, State, TerminalError

MakeDedup = Callable[..., Deduplicator]
ReadRecord = Callable[[str], Record | None]
MODES = [Mode.TRANSACTION, Mode.WRITE_ONLY]


def _increment(counter: firestore.DocumentReference) -> Callable[[Delivery], None]:
    def handler(delivery: Delivery) -> None:
        writer = delivery.transaction if delivery.transaction is not None else delivery.batch
        assert writer is not None
        writer.set(counter, {"n": firestore.Increment(1)}, merge=True)

    return handler


@pytest.mark.parametrize("mode", MODES)
def test_effect_commits_once_with_the_marker(
    make_dedup: MakeDedup, read_record: ReadRecord, firestore_client: firestore.Client, mode: Mode
) -> None:
    """The first delivery commits effect + sent marker; redeliveries are duplicates."""
    counter = firestore_client.collection("counters").document("c")
    handler = _increment(counter)
    assert make_dedup().run("e1", "s", handler, mode=mode).kind is OutcomeKind.RAN
    assert make_dedup().run("e1", "s", handler, mode=mode).kind is OutcomeKind.DUPLICATE
    assert counter.get().to_dict() == {"n": 1}
    record = read_record("e1-s")
    assert record is not None
    assert (record.state, record.sent, record.attempts, record.mode) == (State.SENT, True, 1, mode)
    assert record.owner is not None  # the committing attempt's token
    assert not record.has_lease


@pytest.mark.parametrize("mode", MODES)
def test_failed_handler_commits_nothing_and_counts_the_attempt(
    make_dedup: MakeDedup, read_record: ReadRecord, firestore_client: firestore.Client, mode: Mode
) -> None:
    """A raising handler's writes are discarded, the attempt is recorded, the error re-raised;
    the retry commits the effect as attempt 2."""
    counter = firestore_client.collection("counters").document("c")
    increment = _increment(counter)

    def failing(delivery: Delivery) -> None:
        increment(delivery)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        make_dedup().run("e1", "s", failing, mode=mode)
    assert not counter.get().exists
    record = read_record("e1-s")
    assert record is not None
    assert (record.state, record.attempts, record.last_error) == (
        State.IN_PROGRESS,
        1,
        "RuntimeError: boom",
    )
    attempts: list[int] = []

    def succeeding(delivery: Delivery) -> None:
        attempts.append(delivery.attempt)
        increment(delivery)

    assert make_dedup().run("e1", "s", succeeding, mode=mode).kind is OutcomeKind.RAN
    assert attempts[-1] == 2
    assert counter.get().to_dict() == {"n": 1}
    record = read_record("e1-s")
    assert record is not None
    assert (record.state, record.attempts) == (State.SENT, 2)


@pytest.mark.parametrize("mode", MODES)
def test_terminal_error_is_failed_and_max_attempts_is_dead(
    make_dedup: MakeDedup, read_record: ReadRecord, mode: Mode
) -> None:
    """TerminalError -> failed, returned normally; exhausting max_attempts -> dead."""

    def terminal(delivery: Delivery) -> None:
        raise TerminalError("HTTP 400")

    assert make_dedup().run("t1", "s", terminal, mode=mode).kind is OutcomeKind.FAILED
    assert make_dedup().run("t1", "s", terminal, mode=mode).kind is OutcomeKind.DUPLICATE
    record = read_record("t1-s")
    assert record is not None
    assert record.state is State.FAILED

    def crashing(delivery: Delivery) -> None:
        raise RuntimeError("poison")

    with pytest.raises(RuntimeError):
        make_dedup(max_attempts=2, min_retry_seconds=0).run("p1", "s", crashing, mode=mode)
    assert (
        make_dedup(max_attempts=2, min_retry_seconds=0).run("p1", "s", crashing, mode=mode).kind
        is OutcomeKind.DEAD
    )
    record = read_record("p1-s")
    assert record is not None
    assert (record.state, record.attempts) == (State.DEAD, 2)
