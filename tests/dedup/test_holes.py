"""The holes an adversarial review found in exactly-once, each closed (issue: "close the holes").

Every test states the invariant it proves and fails on the code before the fix.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable

import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud import firestore

from dedup import (
    AsyncDelivery,
    ConfigError,
    DedupConfig,
    Deduplicator,
    Delivery,
    InvalidSuffix,
    KeyCollision,
    LeaseHeld,
    Mode,
    OutcomeKind,
    Record,
    State,
    StoreUnavailable,
    SuffixRegistry,
    dedup_key,
    trigger_once,
)
from dedup.kernel.transitions import SERVER_TIMESTAMP, operator_released
from tests.dedup.grpc_faults import Fault, Plan, commits_cut_rollbacks_refused, faulty_client, nth
from tests.dedup.support import write_foreign_lease

MakeDedup = Callable[..., Deduplicator]
ReadRecord = Callable[[str], Record | None]
ATOMIC = [Mode.TRANSACTION, Mode.WRITE_ONLY]
EFFECTS = "effects"


class Counting:
    """A handler that counts its calls and runs `body(delivery)`."""

    def __init__(self, body: Callable[[Delivery], object] = lambda d: None) -> None:
        self.calls = 0
        self.body = body

    def __call__(self, delivery: Delivery) -> None:
        self.calls += 1
        self.body(delivery)


def writer(delivery: Delivery) -> firestore.Transaction | firestore.WriteBatch:
    """The transaction or batch of an atomic-mode delivery."""
    found = delivery.transaction if delivery.transaction is not None else delivery.batch
    assert found is not None
    return found


def add_effect(delivery: Delivery) -> None:
    """The handler's effect: one document in `effects`, written the way its mode commits."""
    ref = delivery.client.collection(EFFECTS).document()
    if delivery.transaction is not None or delivery.batch is not None:
        writer(delivery).create(ref, {"key": delivery.key})
    else:
        ref.create({"key": delivery.key})


def effects(client: firestore.Client) -> int:
    """How many effects committed."""
    return sum(1 for _ in client.collection(EFFECTS).list_documents())


# --- 1. The handler's own writes fail the commit ---------------------------------------------


@pytest.mark.parametrize("mode", ATOMIC)
def test_a_commit_refused_for_the_handlers_writes_counts_an_attempt(
    mode: Mode, make_dedup: MakeDedup, read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """A handler whose own write is refused (update of a missing document: NotFound) counts
    one attempt per delivery, and `max_attempts` makes the event dead (it used to be retried
    12 times per delivery, then reported unavailable, with no record ever written).

    The handler runs once per delivery; write-only mode builds its batch once more on a
    redelivery, because it assumes no record until its blind create fails."""
    missing = firestore_client.collection("posts").document("missing")
    handler = Counting(lambda d: writer(d).update(missing, {"n": 1}))
    dedup = make_dedup(max_attempts=2, min_retry_seconds=0, cache_size=0)
    with pytest.raises(api_exceptions.NotFound):
        dedup.run("e1", "s", handler, mode=mode)
    assert handler.calls == 1
    record = read_record("e1-s")
    assert record is not None
    assert (record.state, record.attempts, record.has_lease) == (State.IN_PROGRESS, 1, False)
    assert record.last_error is not None
    assert "NotFound" in record.last_error
    assert dedup.run("e1", "s", handler, mode=mode).kind is OutcomeKind.DEAD
    assert handler.calls == (2 if mode is Mode.TRANSACTION else 3)
    assert read_record("e1-s").state is State.DEAD  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ATOMIC)
def test_a_create_of_an_existing_document_counts_an_attempt(
    mode: Mode, make_dedup: MakeDedup, read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """AlreadyExists from the handler's create is the handler's failure, not the marker's."""
    existing = firestore_client.collection("posts").document("p1")
    existing.create({"n": 0})
    handler = Counting(lambda d: writer(d).create(existing, {"n": 1}))
    with pytest.raises(api_exceptions.AlreadyExists):
        make_dedup(max_attempts=3, min_retry_seconds=0).run("e1", "s", handler, mode=mode)
    assert handler.calls == 1
    assert read_record("e1-s").attempts == 1  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ATOMIC)
def test_invalid_data_is_a_terminal_failure_recorded_once(
    mode: Mode, make_dedup: MakeDedup, read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """Data Firestore refuses as invalid (a document over 1 MiB) cannot succeed on a retry: the
    event is recorded failed and the delivery returns, so the platform stops. (The attempt is
    tried once more with a fresh transaction first, because an expired transaction is refused
    with the same error: the handler builds its writes twice, nothing commits.)"""
    target = firestore_client.collection("posts").document("big")

    def too_large(delivery: Delivery) -> None:
        add_effect(delivery)
        writer(delivery).set(target, {"blob": "x" * (1_100_000)})

    handler = Counting(too_large)
    outcome = make_dedup().run("e1", "s", handler, mode=mode)
    assert (outcome.kind, handler.calls) == (OutcomeKind.FAILED, 2)
    record = read_record("e1-s")
    assert record is not None
    assert record.state is State.FAILED
    assert make_dedup().run("e1", "s", handler, mode=mode).kind is OutcomeKind.DUPLICATE
    assert effects(firestore_client) == 0


def test_invalid_argument_from_a_lease_mode_handler_is_terminal(
    make_dedup: MakeDedup, read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """A lease-mode handler whose write Firestore refuses as invalid is failed, not retried."""
    target = firestore_client.collection("posts").document("big")
    handler = Counting(lambda d: target.set({"blob": "x" * 1_100_000}))
    assert make_dedup().run("e1", "s", handler).kind is OutcomeKind.FAILED
    assert read_record("e1-s").state is State.FAILED  # type: ignore[union-attr]


# --- Handlers the package cannot run ----------------------------------------------------------


def test_an_async_handler_is_never_marked_sent_unawaited() -> None:
    """An `async def` handler must not be marked sent without ever running (its coroutine
    never awaited): `trigger_once` makes it an `async def` function that awaits it
    (tests/dedup/test_async_modes.py), and the sync `Deduplicator.run` refuses one."""

    async def handler(event: object, delivery: AsyncDelivery) -> None:  # pragma: no cover
        raise AssertionError("never called")

    class AsyncCallable:
        async def __call__(self, delivery: AsyncDelivery) -> None:  # pragma: no cover
            raise AssertionError("never called")

    wrapped = trigger_once("async_handler", registry=SuffixRegistry())(handler)
    assert inspect.iscoroutinefunction(wrapped)
    for refused in (handler, AsyncCallable()):
        with pytest.raises(ConfigError, match="async"):
            Deduplicator(DedupConfig()).run("e1", "s", refused)  # type: ignore[arg-type]


# --- 2. Keys cannot collide -------------------------------------------------------------------


def test_suffixes_cannot_hold_the_key_separator() -> None:
    """`("post-launch-email", "notify")` and `("post-launch", "email-notify")` would share a
    key; a suffix with "-" is refused, so distinct pairs give distinct keys."""
    assert dedup_key("post-launch-email", "notify") == "post-launch-email-notify"
    with pytest.raises(InvalidSuffix, match="no '-'"):
        dedup_key("post-launch", "email-notify")


@pytest.mark.parametrize("mode", list(Mode))
def test_a_record_of_another_event_at_the_key_is_refused(
    mode: Mode, make_dedup: MakeDedup, firestore_client: firestore.Client
) -> None:
    """A record at this key written for another (event, suffix) pair, by hand or by an older
    version, is never taken for this event's: the handler does not run and nothing is skipped
    silently."""
    write_foreign_lease(firestore_client, "a-b", started=SERVER_TIMESTAMP)
    firestore_client.collection("triggerEvents").document("a-b").update(
        {"eventId": "x", "state": "sent", "leaseStartedAt": None}
    )
    with pytest.raises(KeyCollision, match="event 'x'"):
        make_dedup().run("a", "b", add_effect, mode=mode)
    assert effects(firestore_client) == 0


# --- 3. Contention on the handler's reads ------------------------------------------------------


def test_contention_on_the_handlers_reads_is_retried_never_counted(
    make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """Aborted raised by a read inside the transaction is contention: the transaction is tried
    again and no attempt is counted, so even `max_attempts=1` runs the effect."""

    def body(delivery: Delivery) -> None:
        if handler.calls == 1:
            raise api_exceptions.Aborted("Transaction lock timeout")

    handler = Counting(body)
    outcome = make_dedup(max_attempts=1, min_retry_seconds=0).run(
        "e1", "s", handler, mode=Mode.TRANSACTION
    )
    assert (outcome.kind, outcome.attempt, handler.calls) == (OutcomeKind.RAN, 1, 2)
    assert read_record("e1-s").state is State.SENT  # type: ignore[union-attr]


# --- 4. Lost responses are recognised as the delivery's own writes -----------------------------


def faulty_dedup(
    plan_method: str, calls: set[int], fault: Fault, **settings: object
) -> Deduplicator:
    """A Deduplicator whose client suffers `fault` on the listed calls of `plan_method`."""
    client = faulty_client(nth(plan_method, calls, fault))
    return Deduplicator(DedupConfig(cache_size=0, **settings), client=client)  # type: ignore[arg-type]


@pytest.mark.parametrize("max_attempts", [1, 10])
def test_a_lost_claim_response_is_the_deliverys_own_claim(
    max_attempts: int, read_record: ReadRecord
) -> None:
    """The claim's create is applied but its response lost: the delivery recognises its own
    lease (owner token) and runs the handler, instead of waiting on itself for a whole lease
    (and, with `max_attempts=1`, having the next delivery bury the event unrun)."""
    dedup = faulty_dedup(
        "Commit", {1}, Fault.LOSE_RESPONSE, max_attempts=max_attempts, min_retry_seconds=0
    )
    handler = Counting()
    outcome = dedup.run("e1", "s", handler)
    assert (outcome.kind, outcome.attempt, handler.calls) == (OutcomeKind.RAN, 1, 1)
    assert read_record("e1-s").state is State.SENT  # type: ignore[union-attr]


def test_a_lost_mark_sent_response_is_the_deliverys_own_success(read_record: ReadRecord) -> None:
    """ "Sent" is applied but its response lost: the retry's precondition fails against the
    delivery's own write, which it recognises, instead of reporting `LeaseLost`."""
    dedup = faulty_dedup("Commit", {2}, Fault.LOSE_RESPONSE)
    handler = Counting()
    assert dedup.run("e1", "s", handler).kind is OutcomeKind.RAN
    assert handler.calls == 1
    assert read_record("e1-s").state is State.SENT  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ATOMIC)
def test_a_lost_commit_response_is_the_attempts_own_commit(
    mode: Mode, read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """An atomic commit applied with its response lost is recognised by the marker's token:
    the delivery reports ran, the effect is there once, and no error reaches the platform."""
    dedup = faulty_dedup("Commit", {1}, Fault.LOSE_RESPONSE)
    counter = firestore_client.collection("counters").document("c")
    handler = Counting(lambda d: writer(d).set(counter, {"n": firestore.Increment(1)}, merge=True))
    assert dedup.run("e1", "s", handler, mode=mode).kind is OutcomeKind.RAN
    assert counter.get().to_dict() == {"n": 1}
    assert read_record("e1-s").state is State.SENT  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ATOMIC)
def test_an_expired_transaction_is_retried_not_a_terminal_failure(
    mode: Mode, read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """A commit refused because the transaction expired ("Transaction is invalid or expired",
    INVALID_ARGUMENT, as after a long pause or a database restart) is not bad data: the
    attempt runs again with a fresh transaction and its effect commits once (the chaos soak
    found these effects lost, recorded `failed`)."""
    dedup = faulty_dedup("Commit", {1}, Fault.INVALID)
    assert dedup.run("e1", "s", add_effect, mode=mode).kind is OutcomeKind.RAN
    assert effects(firestore_client) == 1
    assert read_record("e1-s").state is State.SENT  # type: ignore[union-attr]


def test_an_expired_transaction_of_a_step_is_retried_not_a_terminal_failure(
    read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """A transactional step whose commit is refused because its transaction expired
    (INVALID_ARGUMENT) runs once more in a fresh transaction: its write commits once and the
    event is sent (the chaos soak found the `steps` function's effects lost, recorded
    `failed`, after a database restart). Commit 1 is the claim, 2 the step's first try."""
    dedup = faulty_dedup("Commit", {2}, Fault.INVALID)
    tries: list[int] = []

    def write(transaction: firestore.Transaction, delivery: Delivery) -> None:
        tries.append(1)
        transaction.create(delivery.client.collection(EFFECTS).document(), {"key": delivery.key})

    def handler(delivery: Delivery) -> None:
        delivery.step("write", write, delivery, transactional=True)

    assert dedup.run("e1", "s", handler).kind is OutcomeKind.RAN
    assert (effects(firestore_client), len(tries)) == (1, 2)
    assert read_record("e1-s").state is State.SENT  # type: ignore[union-attr]


def released_then_sent(
    plan: Plan,
    handler: Callable[[Delivery], None],
    raised: type[Exception],
    read_record: ReadRecord,
    firestore_client: firestore.Client,
) -> None:
    """Event e1 delivered through a client suffering `plan` raises `raised` and leaves its
    record in progress (released for the platform's retry, not `failed`); the next delivery,
    through a sound client, runs `handler`, commits its write once and records "sent"."""
    config = DedupConfig(cache_size=0, min_retry_seconds=0)
    with pytest.raises(raised):
        Deduplicator(config, client=faulty_client(plan)).run("e1", "s", handler)
    assert read_record("e1-s").state is State.IN_PROGRESS  # type: ignore[union-attr]
    again = Deduplicator(config, client=firestore_client)
    assert again.run("e1", "s", handler).kind is OutcomeKind.RAN
    assert effects(firestore_client) == 1
    assert read_record("e1-s").state is State.SENT  # type: ignore[union-attr]


def test_a_refused_rollback_never_stands_for_a_steps_failed_commit(
    read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """A transactional step's commit is cut off unsent (DEADLINE_EXCEEDED: nothing applied),
    and its rollback is refused as invalid, as after a database restart (the soak saw this
    chain). The attempt failed of its commit's error, which a retry cures: it is released, not
    recorded `failed` on the rollback's INVALID_ARGUMENT, and the next delivery commits the
    step's write once. (Commit 1 is the claim; 2 and 3 the step's, or the release.)"""

    def write(transaction: firestore.Transaction, delivery: Delivery) -> None:
        # The read begins the transaction, so a rollback is sent. It reads another document
        # than it writes: a transaction whose rollback was refused is still open on the
        # emulator, holding its read's lock until it expires (60 s).
        delivery.client.collection("probes").document(delivery.key).get(transaction=transaction)
        effect = delivery.client.collection(EFFECTS).document(delivery.key)
        transaction.create(effect, {"key": delivery.key})

    def handler(delivery: Delivery) -> None:
        delivery.step("write", write, delivery, transactional=True)

    plan = commits_cut_rollbacks_refused({2, 3})
    released_then_sent(
        plan, handler, api_exceptions.DeadlineExceeded, read_record, firestore_client
    )


def test_a_refused_rollback_never_stands_for_a_handlers_own_failed_commit(
    read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """A lease-mode handler runs its own transaction through the client library, which raises
    a refused rollback's INVALID_ARGUMENT in place of the commit's DEADLINE_EXCEEDED (nothing
    applied). The first error the handler's failure chains is what it failed of: a retry may
    cure it, so the attempt is released, not recorded `failed`, and the next delivery commits
    the write once. (Commit 1 is the claim, 2 the handler's; 3 the release.)"""

    def handler(delivery: Delivery) -> None:
        client = delivery.client

        @firestore.transactional
        def write(transaction: firestore.Transaction) -> None:
            client.collection("probes").document(delivery.key).get(transaction=transaction)
            effect = client.collection(EFFECTS).document(delivery.key)
            transaction.create(effect, {"key": delivery.key})

        write(client.transaction())

    plan = commits_cut_rollbacks_refused({2})
    released_then_sent(plan, handler, api_exceptions.InvalidArgument, read_record, firestore_client)


# --- 7. An operator's release -------------------------------------------------------------------


def test_release_of_a_live_lease_lets_its_running_owner_record_the_outcome(
    make_dedup: MakeDedup, read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """An operator releases the lease of a handler still running at its last attempt; when the
    handler returns, its outcome is recorded as sent (the effect happened), not lost, not
    dead."""
    ref = firestore_client.collection("triggerEvents").document("e1-s")
    handler = Counting(lambda d: ref.update(operator_released()))
    outcome = make_dedup(max_attempts=1, min_retry_seconds=0).run("e1", "s", handler)
    assert outcome.kind is OutcomeKind.RAN
    assert read_record("e1-s").state is State.SENT  # type: ignore[union-attr]


# --- 8. Atomic modes honour a live lease (a mode changed during a rolling deploy) --------------


@pytest.mark.parametrize("mode", ATOMIC)
def test_atomic_modes_wait_for_a_live_lease(
    mode: Mode, make_dedup: MakeDedup, read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """A lease-mode delivery of the key holds a live lease (the function's mode is changing
    during a deploy): an atomic-mode delivery raises `LeaseHeld` and runs nothing."""
    write_foreign_lease(firestore_client, "e1-s", started=SERVER_TIMESTAMP)
    with pytest.raises(LeaseHeld):
        make_dedup().run("e1", "s", add_effect, mode=mode)
    assert effects(firestore_client) == 0
    assert read_record("e1-s").owner == "crashed-owner"  # type: ignore[union-attr]


# --- 9. Every id maps to a key ------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(Mode))
def test_an_id_with_a_lone_surrogate_maps_to_a_key(
    mode: Mode, make_dedup: MakeDedup, read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """A JSON `\\ud800` escape in an event id gives a key and a record, not UnicodeEncodeError."""
    event_id = "evt-\ud800-1"
    assert make_dedup().run(event_id, "s", add_effect, mode=mode).kind is OutcomeKind.RAN
    assert make_dedup().run(event_id, "s", add_effect, mode=mode).kind is OutcomeKind.DUPLICATE
    record = read_record(dedup_key(event_id, "s"))
    assert record is not None
    assert record.event_id == "evt-\\ud800-1"
    assert effects(firestore_client) == 1


# --- 10. Transactions are bounded by the RPC timeout ---------------------------------------------


def read_in_transaction(delivery: Delivery) -> None:
    """A handler body that reads through its transaction (which begins it), then writes."""
    assert delivery.transaction is not None
    ref = delivery.client.collection(EFFECTS).document("read-first")
    ref.get(transaction=delivery.transaction)
    delivery.transaction.set(ref, {"key": delivery.key})


def test_a_hanging_begin_is_bounded_by_the_rpc_timeout(firestore_host: str) -> None:
    """A transaction whose begin hangs gives up after about `rpc_timeout_seconds` (here 2 s),
    not the client library's 60 s. A transaction begins at the handler's first read through it,
    so a begin that fails is that read failing: the handler raises (the library's retry of the
    begin ran out of time), the record is released for the platform's retry."""
    dedup = faulty_dedup("BeginTransaction", set(range(1, 100)), Fault.HANG, rpc_timeout_seconds=2)
    started = time.monotonic()
    with pytest.raises(api_exceptions.RetryError):
        dedup.run("e1", "s", Counting(read_in_transaction), mode=Mode.TRANSACTION)
    assert time.monotonic() - started < 45  # well under one library default of 60 s


def test_a_hanging_commit_is_bounded_by_the_rpc_timeout(firestore_host: str) -> None:
    """A transaction whose commit hangs gives up after about `rpc_timeout_seconds` (here 2 s),
    not the client library's 60 s nor the whole time budget (9 s): the delivery tries the
    commit again, three times or more within its budget, then answers `BudgetSpent` (the
    store's failure, `StoreUnavailable`), nothing committed."""
    client = faulty_client(nth("Commit", set(range(1, 100)), Fault.HANG))
    config = DedupConfig(cache_size=0, rpc_timeout_seconds=2, function_timeout_seconds=9)
    dedup = Deduplicator(config, client=client)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        dedup.run("e1", "s", Counting(read_in_transaction), mode=Mode.TRANSACTION)
    assert time.monotonic() - started < 12  # the budget and the last RPCs' floors
    assert client.interceptor.calls["Commit"] >= 3


@pytest.mark.parametrize(("body", "begins"), [(add_effect, 0), (read_in_transaction, 1)])
def test_a_transaction_begins_at_the_handlers_first_read(
    body: Callable[[Delivery], None], begins: int, read_record: ReadRecord
) -> None:
    """A handler that only writes commits its writes and the marker in one atomic Commit, no
    BeginTransaction; one that reads gets its transaction at that read. Both commit once."""
    client = faulty_client(lambda method, n: Fault.PASS)
    dedup = Deduplicator(DedupConfig(cache_size=0), client=client)
    handler = Counting(body)
    assert dedup.run("e1", "s", handler, mode=Mode.TRANSACTION).kind is OutcomeKind.RAN
    assert dedup.run("e1", "s", handler, mode=Mode.TRANSACTION).kind is OutcomeKind.DUPLICATE
    calls = client.interceptor.calls
    assert (calls["BeginTransaction"], calls["Commit"], handler.calls) == (begins, 1, 1)
    assert calls["Rollback"] == 0
    assert read_record("e1-s").state is State.SENT  # type: ignore[union-attr]


# --- A store error after the effect never runs the effect again ---------------------------------


@pytest.mark.parametrize("fault", [Fault.ABORT, Fault.DEADLINE, Fault.LOSE_RESPONSE])
def test_store_errors_on_mark_sent_are_retried_not_reported(
    fault: Fault, read_record: ReadRecord
) -> None:
    """Under load Firestore answers "Transaction lock timeout" (ABORTED) or DEADLINE_EXCEEDED;
    when that hits "sent" after the handler ran, the delivery keeps trying (the write is fenced,
    so retrying is safe) and records it, instead of raising and leaving the lease to expire for
    another copy to run the effect again."""
    dedup = faulty_dedup("Commit", {2, 3, 4}, fault)
    handler = Counting()
    assert dedup.run("e1", "s", handler).kind is OutcomeKind.RAN
    assert handler.calls == 1
    record = read_record("e1-s")
    assert record is not None
    assert record.state is State.SENT
