"""Durable steps attacked as a hostile user and a slow database would, on the Firestore emulator:
a delivery that stalls past its lease, replays called with other arguments or another
function, steps started concurrently, records an earlier version scrambled, and lost, slow or
refused responses at each step write. Leases are short (3 to 6 s) so that each scenario runs in
seconds; nothing depends on that but the time it takes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from functools import partial
from typing import Any

import pytest
from google.cloud import firestore

from dedup import (
    AsyncDelivery,
    DedupConfig,
    Deduplicator,
    Delivery,
    LeaseHeld,
    LeaseLost,
    OutcomeKind,
    Record,
    StepInterrupted,
    StepMismatch,
    StoreUnavailable,
)
from dedup.kernel.delivery import Step
from dedup.kernel.record import State
from dedup.kernel.steps import fingerprint
from dedup.kernel.transitions import dedup_key
from tests.dedup.conftest import MakeAsyncDedup, MakeDedup
from tests.dedup.grpc_faults import Fault, faulty_client, nth
from tests.matrix.kinds import Crash

SUFFIX = "orders"
EVENT = "order-1"
KEY = dedup_key(EVENT, SUFFIX)
LEASE = 3
SHORT: dict[str, Any] = {
    "lease_seconds": LEASE,
    "rpc_timeout_seconds": 1,
    "min_retry_seconds": 0,
    "cache_size": 0,
}

ReadRecord = Callable[[str], Record | None]


def crash_at(dedup: Deduplicator, step: Step, nth_time: int) -> Deduplicator:
    """`dedup`, whose process dies (`Crash`) the `nth_time` it reaches `step`."""
    seen: Counter[Step] = Counter()

    def die(reached: Step, key: str) -> None:
        seen[reached] += 1
        if (reached, seen[reached]) == (step, nth_time):
            raise Crash

    dedup.on_step(die)
    return dedup


def deliver_until_claimed(dedup: Deduplicator, handler: Any, event: str = EVENT) -> Any:
    """Deliver until the lease is ours (the platform retries a `LeaseHeld`); the outcome."""
    deadline = time.monotonic() + 20
    while True:
        try:
            return dedup.run(event, SUFFIX, handler)
        except LeaseHeld:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def noting[T](calls: Any, name: Any, value: T) -> Callable[[], T]:
    """A step function that appends `name` to `calls` (a list or a Counter), then returns
    `value`."""

    def call() -> T:
        calls.update([name]) if isinstance(calls, Counter) else calls.append(name)
        return value

    return call


def waiting(started: list[str], name: str, event: threading.Event) -> Callable[[], str]:
    """A step function that appends `name` to `started`, waits for `event`, then returns
    `<name>-value`."""

    def call() -> str:
        started.append(name)
        event.wait(10)
        return f"{name}-value"

    return call


def steps_of(read_record: ReadRecord, key: str = KEY) -> dict[str, Any]:
    found = read_record(key)
    assert found is not None
    return dict(found.steps or {})


# --- No step function runs after its delivery's lease has ended -------------------------------


def test_a_delivery_that_stalled_past_its_lease_calls_no_step_after_the_take_over(
    make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """A records step 1 and stalls past its lease; B takes the lease over, replays step 1,
    runs step 2 and records the event sent; A resumes: A's step-2 function is never called
    (it gets `LeaseLost` before the call, by its own clock, without a round trip)."""
    calls: list[tuple[str, str]] = []
    recorded, resume = threading.Event(), threading.Event()

    def handler_of(who: str) -> Callable[[Delivery], None]:
        def handler(delivery: Delivery) -> None:
            delivery.step("one", noting(calls, ("one", who), who))
            if who == "A":
                recorded.set()
                resume.wait(30)
            delivery.step("two", noting(calls, ("two", who), who))

        return handler

    a_raised: list[BaseException] = []

    def deliver_a() -> None:
        try:
            make_dedup(**SHORT).run(EVENT, SUFFIX, handler_of("A"))
        except BaseException as exc:
            a_raised.append(exc)

    a = threading.Thread(target=deliver_a)
    a.start()
    assert recorded.wait(20)
    outcome = deliver_until_claimed(make_dedup(**SHORT), handler_of("B"))
    resume.set()
    a.join(30)
    assert outcome.kind is OutcomeKind.RAN
    assert calls == [("one", "A"), ("two", "B")]
    assert [type(exc) for exc in a_raised] == [LeaseLost], a_raised
    assert steps_of(read_record)["two"]["value"] == "B"


def test_a_delivery_past_its_lease_by_its_own_clock_calls_nothing_even_unchallenged(
    make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """A delivery whose lease has passed its end by the instance's own measure calls no
    further step function, even when no other delivery took the lease over (it cannot know
    without asking): `LeaseLost`, the lease left to expire; the next delivery replays step 1
    and calls step 2, once in all."""
    calls: Counter[str] = Counter()
    stall = [LEASE + 0.5]

    def handler(delivery: Delivery) -> None:
        delivery.step("one", noting(calls, "one", None))
        time.sleep(stall.pop() if stall else 0)
        delivery.step("two", noting(calls, "two", None))

    with pytest.raises(LeaseLost, match="'two'"):
        make_dedup(**SHORT).run(EVENT, SUFFIX, handler)
    assert calls == Counter(one=1)
    assert set(steps_of(read_record)) == {"one"}
    assert deliver_until_claimed(make_dedup(**SHORT), handler).kind is OutcomeKind.RAN
    assert calls == Counter(one=1, two=1)


def test_a_slow_step_write_renews_the_lease_from_when_it_was_sent(
    make_dedup: MakeDedup,
) -> None:
    """The lease a step's write renews is measured from the moment the write was sent, not
    answered (it may have committed at any moment between): a write answered 3 s late, then 3
    s of the handler's own, with a 6 s lease, is past the lease by that measure, and the next
    step is not called. (Commit 1 is the claim, 2 the first step's record.)"""

    def plan(method: str, n: int) -> Fault:
        if (method, n) == ("Commit", 2):
            time.sleep(3)
        return Fault.PASS

    dedup = Deduplicator(DedupConfig(**{**SHORT, "lease_seconds": 6}), client=faulty_client(plan))
    calls: Counter[str] = Counter()

    def handler(delivery: Delivery) -> None:
        delivery.step("one", noting(calls, "one", None))
        time.sleep(3)
        delivery.step("two", noting(calls, "two", None))

    with pytest.raises(LeaseLost):
        dedup.run(EVENT, SUFFIX, handler)
    assert calls == Counter(one=1)


# --- Replays fail closed on changed arguments and functions ------------------------------------


def test_a_replay_over_a_reordered_list_raises_step_mismatch(
    make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """Steps named by their place in a list whose order changed between deliveries (`charge0`,
    `charge1`): the replay of `charge0` with another item raises `StepMismatch` naming the step,
    what was recorded and what is called, instead of handing item B item A's charge (B never
    charged, A charged twice)."""
    charged: list[str] = []
    items = ["item-A", "item-B"]

    def charge(item: str) -> dict[str, str]:
        charged.append(item)
        return {"charge": f"ch-{item}"}

    def handler(delivery: Delivery) -> None:
        for i, item in enumerate(items):
            delivery.step(f"charge{i}", charge, item)

    with pytest.raises(Crash):
        crash_at(make_dedup(**SHORT), Step.AFTER_STEP_RECORD, 1).run(EVENT, SUFFIX, handler)
    items.reverse()
    with pytest.raises(StepMismatch) as raised:
        deliver_until_claimed(make_dedup(**SHORT), handler)
    message = str(raised.value)
    assert "'charge0'" in message, message
    assert message.count("charge(arguments #") == 2, message
    assert charged == ["item-A"]
    assert steps_of(read_record)["charge0"]["value"] == {"charge": "ch-item-A"}


def test_a_replay_with_another_function_under_the_same_name_raises_step_mismatch(
    make_dedup: MakeDedup,
) -> None:
    """The same step name bound to another function on the retry (the handler changed between
    deliveries): `StepMismatch` naming both functions, and the new function is not called."""
    calls: list[str] = []

    def send_email(to: str) -> str:
        calls.append("email")
        return "sent"

    def send_sms(to: str) -> str:
        calls.append("sms")
        return "sent"

    fn = [send_email]

    def handler(delivery: Delivery) -> None:
        delivery.step("notify", fn[0], "ada@example.com")
        delivery.step("close", lambda: None)

    with pytest.raises(Crash):
        crash_at(make_dedup(**SHORT), Step.AFTER_STEP_RECORD, 1).run(EVENT, SUFFIX, handler)
    fn[0] = send_sms
    with pytest.raises(StepMismatch, match=r"send_email\(.*send_sms\("):
        deliver_until_claimed(make_dedup(**SHORT), handler)
    assert calls == ["email"]


def test_a_step_recorded_without_a_fingerprint_still_replays(
    make_dedup: MakeDedup, firestore_client: firestore.Client
) -> None:
    """A step recorded before steps kept fingerprints (no `fn`, no `args`) replays as it did:
    its value, its function not called again, whatever it is called with now."""
    calls: list[str] = []
    argument = ["first"]

    def charge(arg: str) -> str:
        calls.append(arg)
        return arg

    def handler(delivery: Delivery) -> None:
        delivery.step("charge", charge, argument[0])
        delivery.step("close", lambda: None)

    with pytest.raises(Crash):
        crash_at(make_dedup(**SHORT), Step.AFTER_STEP_RECORD, 1).run(EVENT, SUFFIX, handler)
    firestore_client.collection("triggerEvents").document(KEY).update(
        {"steps.charge.fn": firestore.DELETE_FIELD, "steps.charge.args": firestore.DELETE_FIELD}
    )
    argument[0] = "second"
    assert deliver_until_claimed(make_dedup(**SHORT), handler).kind is OutcomeKind.RAN
    assert calls == ["first"]


def test_a_replayed_value_passed_to_the_next_step_matches_its_first_fingerprint(
    make_dedup: MakeDedup,
) -> None:
    """A step's value, as Firestore hands it back on a replay (a timestamp in UTC, a float,
    a map in another key order), passed on to the next step, gives the fingerprint the first
    call recorded: a replay never raises `StepMismatch` for a handler that did not change."""
    calls: Counter[str] = Counter()
    quote = {
        "at": datetime(2026, 12, 6, 10, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2))),
        "amount": 2.0,
        "lines": [{"sku": "a", "n": 1}, {"n": 2, "sku": "b"}],
    }

    def charge(got: dict[str, Any], currency: str) -> str:
        calls.update(["charge"])
        return "charged"

    def handler(delivery: Delivery) -> None:
        got = delivery.step("quote", noting(calls, "quote", quote))
        delivery.step("charge", charge, got, currency="EUR")
        delivery.step("receipt", noting(calls, "receipt", None))

    with pytest.raises(Crash):
        crash_at(make_dedup(**SHORT), Step.AFTER_STEP_RECORD, 2).run(EVENT, SUFFIX, handler)
    assert deliver_until_claimed(make_dedup(**SHORT), handler).kind is OutcomeKind.RAN
    assert calls == Counter(quote=1, charge=1, receipt=1)


def test_fingerprints_follow_what_a_firestore_round_trip_keeps() -> None:
    """The fingerprint of a call: equal for arguments a Firestore round trip returns equal (a
    tuple and a list, 1 and 1.0, one instant in two zones, a map's key order, a partial and its
    function), different for other values or another function; an argument Firestore could not
    store counts by its type alone."""
    at = datetime(2026, 12, 6, 8, 0, tzinfo=UTC)
    zone = timezone(timedelta(hours=2))

    def charge(*args: Any, **kwargs: Any) -> None: ...

    def refund(*args: Any, **kwargs: Any) -> None: ...

    same: list[tuple[tuple[Any, ...], tuple[Any, ...]]] = [
        (((1, "a"), {"k": 1, "j": 2.0}), ([1, "a"], {"j": 2, "k": 1.0})),
        ((at,), (at.astimezone(zone),)),
        ((Decimal(1),), (Decimal(2),)),
    ]
    for first, second in same:
        assert fingerprint(charge, first, {}) == fingerprint(charge, second, {}), first
    assert fingerprint(partial(charge, "x"), ("y",), {"z": 1}) == fingerprint(
        charge, ("x", "y"), {"z": 1}
    )
    differ: list[tuple[tuple[Any, ...], tuple[Any, ...]]] = [
        (("item-A",), ("item-B",)),
        ((1,), (True,)),
        (("1",), (1,)),
        (([1],), ([[1]],)),
    ]
    for first, second in differ:
        assert fingerprint(charge, first, {}) != fingerprint(charge, second, {}), first
    assert fingerprint(charge, (1,), {})["fn"] != fingerprint(refund, (1,), {})["fn"]


# --- Concurrent steps refused at once ---------------------------------------------------------


def test_steps_gathered_concurrently_the_second_raises_and_the_first_is_kept(
    make_async_dedup: MakeAsyncDedup, read_record: ReadRecord
) -> None:
    """Two steps of one delivery started concurrently (`asyncio.gather`): the second raises
    `StepMismatch` before its function runs and writes nothing; the first runs and its record
    keeps its entry, at its own place."""
    started: list[str] = []
    results: list[Any] = []

    async def slow(name: str) -> str:
        started.append(name)
        await asyncio.sleep(0.3)
        return f"{name}-value"

    async def handler(delivery: AsyncDelivery) -> None:
        results.extend(
            await asyncio.gather(
                delivery.step("a", slow, "a"), delivery.step("b", slow, "b"), return_exceptions=True
            )
        )

    outcome = asyncio.run(make_async_dedup(**SHORT).run(EVENT, SUFFIX, handler))
    assert outcome.kind is OutcomeKind.RAN
    assert started == ["a"]
    assert results[0] == "a-value"
    assert isinstance(results[1], StepMismatch), results
    steps = steps_of(read_record)
    assert set(steps) == {"a"}
    assert (steps["a"]["index"], steps["a"]["state"], steps["a"]["value"]) == (0, "done", "a-value")


def test_a_step_started_from_another_thread_while_one_runs_raises_before_its_call(
    make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """The same with threads over one sync delivery: the step started while another runs
    raises before its function is called; the running step's entry is recorded intact."""
    started: list[str] = []
    raised: list[BaseException] = []
    tried = threading.Event()
    first = waiting(started, "first", tried)

    def handler(delivery: Delivery) -> None:
        def second() -> None:
            try:
                delivery.step("second", noting(started, "second", None))
            except BaseException as exc:
                raised.append(exc)
            tried.set()

        threading.Timer(0.2, second).start()
        delivery.step("first", first)

    assert make_dedup(**SHORT).run(EVENT, SUFFIX, handler).kind is OutcomeKind.RAN
    assert started == ["first"]
    assert [type(exc) for exc in raised] == [StepMismatch], raised
    steps = steps_of(read_record)
    assert set(steps) == {"first"}
    assert steps["first"]["value"] == "first-value"


def test_a_step_the_handler_did_not_wait_for_renews_no_lease_and_none_starts_after_the_end(
    make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """A step still running when its delivery ended (a thread the handler did not join)
    records its entry without taking a lease on the finished record; a step started after the
    end raises `LeaseLost` and its function is not called."""
    started: list[str] = []
    deliveries: list[Delivery] = []
    release = threading.Event()
    slow = waiting(started, "slow", release)

    threads: list[threading.Thread] = []

    def handler(delivery: Delivery) -> None:
        deliveries.append(delivery)
        threads.append(threading.Thread(target=delivery.step, args=("slow", slow)))
        threads[0].start()
        while not started:
            time.sleep(0.01)

    assert make_dedup(**SHORT).run(EVENT, SUFFIX, handler).kind is OutcomeKind.RAN
    release.set()
    # The slow step is over once its thread is: its entry is written and the step has ended
    # (its record landing alone is not the end: a step begun then meets the running one).
    threads[0].join(timeout=60)
    assert not threads[0].is_alive()
    with pytest.raises(LeaseLost, match="after its delivery ended"):
        deliveries[0].step("late", noting(started, "late", None))
    assert started == ["slow"]
    record = read_record(KEY)
    assert record is not None
    assert record.state is State.SENT
    assert not record.has_lease
    assert (record.steps or {})["slow"]["value"] == "slow-value"


def test_a_step_write_leaves_every_other_entry_as_it_finds_it(
    make_dedup: MakeDedup, firestore_client: firestore.Client, read_record: ReadRecord
) -> None:
    """A step's write updates its own entry of `steps` (by field path, its name quoted: dots
    and dashes are kept whole), never the whole map: an entry written after the delivery read
    the record is still there after its next step."""
    ref = firestore_client.collection("triggerEvents").document(KEY)

    def handler(delivery: Delivery) -> None:
        delivery.step("v1.reserve", lambda: "reserved")
        ref.update({"steps.`from-elsewhere`": {"index": 9, "state": "done", "value": 1}})
        delivery.step("0-charge", lambda: "charged")

    assert make_dedup(**SHORT).run(EVENT, SUFFIX, handler).kind is OutcomeKind.RAN
    steps = steps_of(read_record)
    assert set(steps) == {"v1.reserve", "from-elsewhere", "0-charge"}
    assert (steps["v1.reserve"]["value"], steps["0-charge"]["value"]) == ("reserved", "charged")


def test_a_record_scrambled_by_concurrent_steps_of_an_earlier_version_recovers(
    make_dedup: MakeDedup, firestore_client: firestore.Client
) -> None:
    """A record an earlier version left after `asyncio.gather` of two steps (one entry at the
    wrong place, the other's lost, no fingerprints) does not block the fixed handler, which
    runs them one after the other: its recorded steps are replayed by name, the lost one is
    called again, and the event ends sent."""
    calls: Counter[str] = Counter()

    def handler(delivery: Delivery) -> None:
        for name in ("s0", "a", "b", "c"):
            delivery.step(name, noting(calls, name, f"{name}-value"))

    with pytest.raises(Crash):
        crash_at(make_dedup(**SHORT), Step.AFTER_STEP_RECORD, 2).run(EVENT, SUFFIX, handler)
    # What the earlier version wrote for `s0`, then gather(a, b): b's write lost, a at place 2.
    legacy = {
        "s0": {"index": 0, "state": "done", "value": "s0-value"},
        "a": {"index": 2, "state": "done", "value": "a-value"},
    }
    firestore_client.collection("triggerEvents").document(KEY).update({"steps": legacy})
    assert deliver_until_claimed(make_dedup(**SHORT), handler).kind is OutcomeKind.RAN
    assert calls == Counter(s0=1, a=1, b=1, c=1)


# --- Lost, slow and refused responses at each step write --------------------------------------


def three_kinds(calls: Counter[str]) -> Callable[[Delivery], None]:
    """A plain step, an at-most-once one (its interruption counted) and a transactional one.
    Commits: 1 the claim, 2 the
    plain step's record, 3 and 4 the at-most-once step's start and end, 5 the transactional
    step's, 6 "sent"."""

    def write(transaction: firestore.Transaction, delivery: Delivery) -> str:
        calls.update(["transactional"])
        doc = delivery.client.collection("effects").document(delivery.key)
        transaction.set(doc, {"n": firestore.Increment(1)})
        return "written"

    def handler(delivery: Delivery) -> None:
        delivery.step("plain", noting(calls, "plain", "p"))
        try:
            delivery.step("once", noting(calls, "once", "o"), on_interrupted="skip")
        except StepInterrupted:
            calls.update(["interrupted"])
        delivery.step("transactional", write, delivery, transactional=True)

    return handler


@pytest.mark.parametrize("commit", [2, 3, 4, 5, 6])
def test_a_lost_response_at_each_step_write_is_the_deliverys_own_write(
    commit: int, read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """Each step write (and "sent") applied with its response lost: the delivery recognises
    its own write, no step function runs twice, every entry is recorded at its place."""
    plan = nth("Commit", {commit}, Fault.LOSE_RESPONSE)
    dedup = Deduplicator(DedupConfig(**SHORT), client=faulty_client(plan))
    calls: Counter[str] = Counter()
    assert dedup.run(EVENT, SUFFIX, three_kinds(calls)).kind is OutcomeKind.RAN
    assert calls == Counter(plain=1, once=1, transactional=1)
    steps = steps_of(read_record)
    assert [steps[n]["index"] for n in ("plain", "once", "transactional")] == [0, 1, 2]
    assert {entry["state"] for entry in steps.values()} == {"done"}
    effect = firestore_client.collection("effects").document(KEY).get().to_dict()
    assert effect == {"n": 1}


@pytest.mark.parametrize("commit", [2, 3, 4, 5, 6])
def test_a_slow_write_at_each_step_write_changes_nothing(
    commit: int, read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """Each step write (and "sent") 2 s slow, within a 6 s lease: every step function runs
    once, every entry is recorded, the event is sent."""

    def plan(method: str, n: int) -> Fault:
        if (method, n) == ("Commit", commit):
            time.sleep(2)
        return Fault.PASS

    dedup = Deduplicator(DedupConfig(**{**SHORT, "lease_seconds": 6}), client=faulty_client(plan))
    calls: Counter[str] = Counter()
    assert dedup.run(EVENT, SUFFIX, three_kinds(calls)).kind is OutcomeKind.RAN
    assert calls == Counter(plain=1, once=1, transactional=1)
    assert {entry["state"] for entry in steps_of(read_record).values()} == {"done"}
    effect = firestore_client.collection("effects").document(KEY).get().to_dict()
    assert effect == {"n": 1}


@pytest.mark.parametrize(
    ("commit", "again"),
    [(2, "plain"), (3, None), (4, "interrupted"), (5, "transactional")],
)
def test_a_step_write_refused_until_the_budget_ends_calls_nothing_twice_that_must_not(
    commit: int, again: str | None, make_dedup: MakeDedup, firestore_client: firestore.Client
) -> None:
    """Every write refused (PERMISSION_DENIED) from one step's write on, until the delivery's
    budget ends: the delivery fails, its lease left to expire; the next delivery calls again a
    plain step whose record was refused (at least once, under its key), calls once an
    at-most-once step whose start was refused (it was never called) and never again one whose
    end was refused (`StepInterrupted`: at most once), and fills a transactional step's
    transaction again, whose write is applied once."""

    def plan(method: str, n: int) -> Fault:
        return Fault.DENY if method == "Commit" and n >= commit else Fault.PASS

    dedup = Deduplicator(DedupConfig(**SHORT), client=faulty_client(plan))
    calls: Counter[str] = Counter()
    with pytest.raises(StoreUnavailable):
        dedup.run(EVENT, SUFFIX, three_kinds(calls))
    assert deliver_until_claimed(make_dedup(**SHORT), three_kinds(calls)).kind is OutcomeKind.RAN
    expected = Counter(plain=1, once=1, transactional=1)
    if again is not None:
        expected[again] += 1
    assert calls == expected
    effect = firestore_client.collection("effects").document(KEY).get().to_dict()
    assert effect == {"n": 1}
