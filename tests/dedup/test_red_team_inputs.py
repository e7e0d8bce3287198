"""What a user hands the kernel, at every write that carries it, on the Firestore emulator, as
the red team ran it: short leases (3 s), RPC timeouts of 1 s, the platform delivering again
after every exception until a delivery returns.

Invariants checked here:

* **A step's value is the same on every delivery.** The delivery that runs a step hands its
  handler the value as the record gives it back to every replay
  (`dedup.platform.firestore_values.as_stored`): a `GeoPoint(35, 139)` is `GeoPoint(35.0,
  139.0)` on the first run as on the replay, a timestamp is an aware UTC
  `DatetimeWithNanoseconds`, a tuple a list, a reference the records' client's. So the next
  step's argument fingerprint agrees between deliveries: the event ends `sent` after a transient
  failure. It used to raise `StepMismatch` on every delivery. Hypothesis generates values of
  every Firestore type. A value no read could give back (a map with a non-string key, a
  reference to another database) is refused at once: one call, `failed`.
* **Lambdas and closures are named, not fingerprinted.** A step counts by its function's
  qualified name and its arguments: `step("pay", lambda: refund(10))` on the next delivery
  replays what `lambda: charge(10)` recorded. The library cannot see what a lambda captures, so
  it warns (`UserWarning`, once per qualified name) at the first such step, and docs/steps.md
  says what to pass instead.
* **A short lease leaves a working budget.** With DEDUP_RPC_TIMEOUT_SECONDS unset the RPC
  timeout follows the lease (a third of it, 1 to 10 s): DEDUP_LEASE_SECONDS=5 gives each
  delivery 4 s, where the 10 s default left it the 1 s floor, so a delivery that lost 1.5 s
  before its claim (a loaded machine, driven here by the budget clock) still runs; a lease of
  1 s, as docs/steps.md suggests for tests, delivers. A timeout set longer than the lease is
  refused where it is set (tests/dedup/test_config.py).
* **Text never blocks a write.** Every string the library writes from user data (an error's
  message and type name, an event's subject and source) goes through one function,
  `dedup.platform.firestore_values.storable_text`: lone surrogates escaped, cut by Firestore's
  UTF-8 bytes. So the release, `failed` and `dead` writes land whatever the handler raised: a
  `TerminalError` whose message holds `"\\ud800"` runs once and ends `failed` (sync, async,
  transaction mode); a plain exception with it leaves the event retryable, `in_progress` with
  no lease, never `unknown` with no effect under `on_ambiguous="skip"`. The release used to be
  refused, the lease kept until it expired, and the next delivery took it over as ambiguous.
  An event whose data, source or subject hold lone surrogates (JSON `"\\ud800"` escapes) gets a
  fingerprint and a record like any other: it used to fail before its claim on every delivery.
* **A refused step is never recorded as run.** A handler that catches the `LeaseLost` (or
  `BudgetSpent`) a step raised and returns normally does not make the event `sent`: the
  delivery raises the refusal again, records nothing (`LeaseLost`) or gives the lease back
  (`BudgetSpent`), and the refused step runs on a later delivery. It used to be `sent` with
  the step never run.
* **No handler starts after its lease.** After `reconcile` (and any step hook before the
  handler) the delivery checks, on its own clock, that its lease is live and its budget not
  spent; else it gives the lease back, ambiguous still, and the handler does not start: a
  `reconcile` answering False after the lease ended starts nothing, and the next delivery asks
  `reconcile` again. The handler used to start, beside the delivery that took the expired lease.
  Time is driven with `DedupConfig.budget_clock`, so no real waiting decides anything.
"""

from __future__ import annotations

import asyncio
import math
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from cloudevents.http import CloudEvent
from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud import firestore
from google.cloud.firestore import GeoPoint
from google.cloud.firestore_v1.base_document import BaseDocumentReference
from google.cloud.firestore_v1.vector import Vector
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dedup import (
    AsyncDeduplicator,
    AsyncDelivery,
    BudgetSpent,
    DedupConfig,
    Deduplicator,
    Delivery,
    LeaseLost,
    Mode,
    OutcomeKind,
    Record,
    State,
    Step,
    TerminalError,
    trigger_once,
)
from dedup.kernel.record import MAX_ERROR_CHARS, error_text, storable_text
from dedup.kernel.transitions import operator_released
from dedup.platform.firestore_values import refusal
from tests.conftest import PROJECT
from tests.dedup.grpc_faults import Fault, faulty_client

MakeDedup = Callable[..., Deduplicator]
MakeAsyncDedup = Callable[..., AsyncDeduplicator]
ReadRecord = Callable[[str], Record | None]

SUFFIX = "s"
LEASE = 3
SHORT: dict[str, Any] = {
    "lease_seconds": LEASE,
    "rpc_timeout_seconds": 1,
    "min_retry_seconds": 0,
    "max_attempts": 3,
    "cache_size": 0,
}
"""The red team's settings: short leases, so that a scenario runs in seconds."""

LONE = "card \ud800 declined \udfff"
"""A message no UTF-8 field can carry as it is: two lone surrogates."""

ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=300)
"""Any text Python can hold, lone surrogates (category Cs) included."""
WITH_SURROGATE = st.tuples(ANY_TEXT, st.characters(categories=["Cs"]), ANY_TEXT).map("".join)
"""Any text holding at least one lone surrogate."""


def event() -> str:
    return f"inputs-{uuid.uuid4().hex[:10]}"


# --- 1. Text never blocks a write ----------------------------------------------------------------


@given(text=ANY_TEXT | st.text(max_size=3000))
def test_storable_text_is_taken_by_firestore_and_keeps_valid_text(text: str) -> None:
    stored = storable_text(text, max_bytes=2000, max_chars=1000)
    assert refusal(stored) is None
    assert type(stored) is str
    assert len(stored) <= 1000
    assert len(stored.encode("utf-8")) <= 2000
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return
    if len(text) <= 1000 and len(text.encode("utf-8")) <= 2000:
        assert stored == text  # valid text within the limits is kept as it is


class Odd(TerminalError):
    """An exception whose `str()` raises: its text cannot even be read."""

    def __str__(self) -> str:
        raise RuntimeError("no message")


ODD_ERRORS: list[tuple[str, Callable[[], Exception]]] = [
    ("surrogate-message", lambda: TerminalError(LONE)),
    ("long-type-name", lambda: type("Declined" * 500, (TerminalError,), {})("no")),
    ("str-raises", lambda: Odd()),
    ("huge-message", lambda: TerminalError("é" * 1_200_000)),
]


@pytest.mark.parametrize("make_error", [e[1] for e in ODD_ERRORS], ids=[e[0] for e in ODD_ERRORS])
def test_terminal_error_with_any_text_runs_once_and_ends_failed(
    make_dedup: MakeDedup, read_record: ReadRecord, make_error: Callable[[], Exception]
) -> None:
    dedup, event_id, calls = make_dedup(**SHORT), event(), [0]

    def handler(delivery: Delivery) -> None:
        calls[0] += 1
        raise make_error()

    outcome = dedup.run(event_id, SUFFIX, handler)
    assert outcome.kind is OutcomeKind.FAILED
    assert calls == [1]
    record = read_record(outcome.key)
    assert record is not None
    assert record.state is State.FAILED
    assert not record.has_lease
    assert record.last_error is not None
    assert len(record.last_error) <= MAX_ERROR_CHARS


def test_terminal_lone_surrogate_is_stored_escaped(
    make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    def handler(delivery: Delivery) -> None:
        raise TerminalError(LONE)

    outcome = make_dedup(**SHORT).run(event(), SUFFIX, handler)
    record = read_record(outcome.key)
    assert record is not None
    assert record.last_error == "TerminalError: card \\ud800 declined \\udfff"


@pytest.mark.parametrize("mode", [Mode.TRANSACTION, Mode.WRITE_ONLY])
def test_atomic_modes_store_any_error_text(
    make_dedup: MakeDedup, read_record: ReadRecord, mode: Mode
) -> None:
    dedup, event_id = make_dedup(**SHORT), event()

    def handler(delivery: Delivery) -> None:
        raise TerminalError(LONE)

    outcome = dedup.run(event_id, SUFFIX, handler, mode=mode)
    assert outcome.kind is OutcomeKind.FAILED
    record = read_record(outcome.key)
    assert record is not None
    assert record.state is State.FAILED
    assert record.last_error is not None
    assert "\\ud800" in record.last_error

    def failing(delivery: Delivery) -> None:
        raise RuntimeError(LONE)

    with pytest.raises(RuntimeError):
        dedup.run(event(), SUFFIX, failing, mode=mode)


def test_plain_error_with_lone_surrogate_releases_the_lease_under_skip(
    make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """The release lands: the event stays retryable, and the next delivery (at once, no lease
    to wait for) runs the handler, never `unknown` with no effect."""
    dedup, event_id, calls = make_dedup(**SHORT), event(), [0]

    def handler(delivery: Delivery) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError(LONE)

    with pytest.raises(RuntimeError):
        dedup.run(event_id, SUFFIX, handler, on_ambiguous="skip")
    key = dedup.record_key(event_id, SUFFIX)
    record = read_record(key)
    assert record is not None
    assert record.state is State.IN_PROGRESS
    assert not record.has_lease
    assert not record.ambiguous
    outcome = dedup.run(event_id, SUFFIX, handler, on_ambiguous="skip")
    assert outcome.kind is OutcomeKind.RAN
    assert calls == [2]


def test_async_lease_mode_stores_any_error_text(
    make_async_dedup: MakeAsyncDedup, read_record: ReadRecord
) -> None:
    dedup, event_id, calls = make_async_dedup(**SHORT), event(), [0]

    async def terminal(delivery: AsyncDelivery) -> None:
        calls[0] += 1
        raise TerminalError(LONE)

    async def plain(delivery: AsyncDelivery) -> None:
        raise RuntimeError(LONE)

    async def deliver() -> tuple[Any, BaseException | None]:
        outcome = await dedup.run(event_id, SUFFIX, terminal)
        try:
            await dedup.run(event_id + "-plain", SUFFIX, plain, on_ambiguous="skip")
        except RuntimeError as exc:
            return outcome, exc
        return outcome, None

    outcome, raised = asyncio.run(deliver())
    assert outcome.kind is OutcomeKind.FAILED
    assert calls == [1]
    assert isinstance(raised, RuntimeError)
    record = read_record(dedup.record_key(event_id + "-plain", SUFFIX))
    assert record is not None
    assert record.state is State.IN_PROGRESS
    assert not record.has_lease


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(message=WITH_SURROGATE | ANY_TEXT)
def test_any_terminal_message_ends_failed_after_one_run(
    make_dedup: MakeDedup, read_record: ReadRecord, message: str
) -> None:
    dedup, calls = make_dedup(**SHORT), [0]

    def handler(delivery: Delivery) -> None:
        calls[0] += 1
        raise TerminalError(message)

    outcome = dedup.run(event(), SUFFIX, handler)
    assert outcome.kind is OutcomeKind.FAILED
    assert calls == [1]
    record = read_record(outcome.key)
    assert record is not None
    assert record.last_error == error_text(TerminalError(message))


def test_subject_and_source_with_any_text_are_stored(
    make_dedup: MakeDedup, firestore_client: firestore.Client
) -> None:
    dedup = make_dedup(**SHORT)
    outcome = dedup.run(
        event(), SUFFIX, lambda d: None, subject="posts/\ud800" + "x" * 10_000, source="//s\udfff"
    )
    assert outcome.kind is OutcomeKind.RAN
    data = firestore_client.collection("triggerEvents").document(outcome.key).get().to_dict()
    assert data is not None
    assert data["subject"].startswith("posts/\\ud800")
    assert data["source"] == "//s\\udfff"
    assert len(data["subject"].encode()) <= 6_144


# --- 2. A refused step is never recorded as run ---------------------------------------------------


class DrivenClock:
    """A budget clock (seconds) that stands still until the test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("jump", "refusal"), [(LEASE + 1, LeaseLost), (1.9, BudgetSpent)])
def test_a_handler_that_swallows_a_refused_step_is_not_recorded_sent(
    make_dedup: MakeDedup, read_record: ReadRecord, jump: float, refusal: type[Exception]
) -> None:
    """The driven clock passes the lease (or only the 1.8 s budget) before step "pay"; the
    handler catches the refusal and returns: the delivery raises it again, "pay" never ran and
    the event is not `sent`. The next delivery, on time, runs "pay" and records `sent`."""
    clock = DrivenClock()
    dedup, event_id, paid, caught = make_dedup(**SHORT, budget_clock=clock), event(), [0], []

    def pay() -> str:
        paid[0] += 1
        return "paid"

    def handler(delivery: Delivery) -> None:
        clock.now += jump
        try:
            delivery.step("pay", pay)
        except (LeaseLost, BudgetSpent) as exc:
            caught.append(exc)

    with pytest.raises(refusal):
        dedup.run(event_id, SUFFIX, handler)
    assert paid == [0]
    assert [type(c) for c in caught] == [refusal]
    record = read_record(dedup.record_key(event_id, SUFFIX))
    assert record is not None
    assert record.state is State.IN_PROGRESS
    if refusal is BudgetSpent:
        assert not record.has_lease  # given back: the event is retryable at once
        outcome = make_dedup(**SHORT).run(event_id, SUFFIX, lambda d: {"paid": d.step("pay", pay)})
        assert outcome.kind is OutcomeKind.RAN
        assert paid == [1]


# --- 3. No handler starts after its lease ------------------------------------------------------


def ambiguous_event(dedup: Deduplicator, firestore_client: firestore.Client) -> str:
    """An event whose record is `in_progress`, its lease given back `ambiguous: true` (as after
    an expired lease, or `dedup release`): the next delivery is an ambiguous take-over."""
    event_id = event()

    def fails(delivery: Delivery) -> None:
        raise RuntimeError("first attempt")

    with pytest.raises(RuntimeError):
        dedup.run(event_id, SUFFIX, fails)
    key = dedup.record_key(event_id, SUFFIX)
    firestore_client.collection("triggerEvents").document(key).update(operator_released())
    return event_id


@pytest.mark.parametrize("on_ambiguous", ["rerun", "skip"])
def test_a_reconcile_that_answers_after_the_lease_starts_no_handler(
    make_dedup: MakeDedup,
    read_record: ReadRecord,
    firestore_client: firestore.Client,
    on_ambiguous: str,
) -> None:
    """`reconcile` answers False 4.5 s later by the delivery's clock (lease 3 s, budget 2 s):
    the handler does not start, the lease is given back still ambiguous, and the next delivery
    asks `reconcile` again, which answering False in time runs the handler once."""
    clock = DrivenClock()
    event_id = ambiguous_event(make_dedup(**SHORT), firestore_client)
    dedup, asked, ran = make_dedup(**SHORT, budget_clock=clock), [0], [0]

    def slow_reconcile(delivery: Delivery) -> bool:
        asked[0] += 1
        clock.now += 4.5
        return False

    def handler(delivery: Delivery) -> None:
        ran[0] += 1

    with pytest.raises(BudgetSpent):
        dedup.run(event_id, SUFFIX, handler, reconcile=slow_reconcile, on_ambiguous=on_ambiguous)
    assert asked == [1]
    assert ran == [0]
    record = read_record(dedup.record_key(event_id, SUFFIX))
    assert record is not None
    assert record.state is State.IN_PROGRESS
    assert not record.has_lease
    assert record.ambiguous  # a later delivery still asks reconcile

    def quick_reconcile(delivery: Delivery) -> bool:
        asked[0] += 1
        return False

    outcome = make_dedup(**SHORT).run(
        event_id, SUFFIX, handler, reconcile=quick_reconcile, on_ambiguous=on_ambiguous
    )
    assert outcome.kind is OutcomeKind.RAN
    assert asked == [2]
    assert ran == [1]


def test_an_async_reconcile_that_answers_after_the_lease_starts_no_handler(
    make_async_dedup: MakeAsyncDedup, make_dedup: MakeDedup, firestore_client: firestore.Client
) -> None:
    clock = DrivenClock()
    event_id = ambiguous_event(make_dedup(**SHORT), firestore_client)
    dedup, ran = make_async_dedup(**SHORT, budget_clock=clock), [0]

    async def slow_reconcile(delivery: AsyncDelivery) -> bool:
        clock.now += 4.5
        return False

    async def handler(delivery: AsyncDelivery) -> None:
        ran[0] += 1

    async def deliver() -> None:
        await dedup.run(event_id, SUFFIX, handler, reconcile=slow_reconcile)

    with pytest.raises(BudgetSpent):
        asyncio.run(deliver())
    assert ran == [0]


# --- 4. A step's value is the same on every delivery ----------------------------------------------


def same(first: Any, second: Any) -> bool:
    """`first` and `second` are equal and of the same types all the way down (NaN is NaN)."""
    if type(first) is not type(second):
        return False
    if isinstance(first, float):
        return first == second or (math.isnan(first) and math.isnan(second))
    if isinstance(first, dict):
        return first.keys() == second.keys() and all(same(first[k], second[k]) for k in first)
    if isinstance(first, list):
        return len(first) == len(second) and all(map(same, first, second))
    if isinstance(first, GeoPoint):
        return same(first.latitude, second.latitude) and same(first.longitude, second.longitude)
    if isinstance(first, Vector):
        return same(list(first), list(second))
    if isinstance(first, BaseDocumentReference):
        return bool(first.path == second.path)
    if isinstance(first, datetime):
        return first == second and first.utcoffset() == second.utcoffset()
    return bool(first == second)


def replayed_twice(dedup: Deduplicator, value: Any) -> tuple[list[Any], OutcomeKind]:
    """Deliver an event whose step "value" returns `value` and whose step "use" takes it as
    its argument; the first delivery fails after both (a transient error), the second replays
    them. What the handler got from "value" on each delivery, and the second's outcome."""
    got: list[Any] = []

    def handler(delivery: Delivery) -> None:
        stored = delivery.step("value", lambda: value)
        got.append(stored)
        delivery.step("use", lambda v: None, stored)
        if len(got) == 1:
            raise RuntimeError("transient")

    event_id = event()
    with pytest.raises(RuntimeError):
        dedup.run(event_id, SUFFIX, handler)
    return got, dedup.run(event_id, SUFFIX, handler).kind


def test_a_geopoint_with_integer_coordinates_feeds_the_next_step_on_every_delivery(
    make_dedup: MakeDedup,
) -> None:
    """The red team's case: `locate` returns `GeoPoint(35, 139)`, `ship` takes it."""
    got, kind = replayed_twice(make_dedup(**SHORT), GeoPoint(35, 139))
    assert kind is OutcomeKind.RAN
    assert same(got[0], got[1])
    assert type(got[0].latitude) is float


@dataclass(frozen=True)
class Place:
    """Stands for a reference to `places/<id>` in a generated value."""

    id: str


OFFSETS = st.builds(
    timezone, st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23))
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats()
    | st.floats().map(lambda f: float(round(f)) if math.isfinite(f) else f)
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | st.datetimes(
        min_value=datetime(1900, 1, 1),  # noqa: DTZ001 - Hypothesis takes naive bounds
        max_value=datetime(2100, 1, 1),  # noqa: DTZ001
        timezones=OFFSETS,
    )
    | st.builds(
        DatetimeWithNanoseconds.from_timestamp_pb,
        st.builds(
            Timestamp,
            seconds=st.integers(0, 4_000_000_000),
            nanos=st.integers(0, 999_999_999),
        ),
    )
    | st.builds(
        GeoPoint,
        st.integers(-90, 90) | st.floats(-90, 90),
        st.integers(-180, 180) | st.floats(-180, 180),
    )
    | st.lists(st.integers(-1000, 1000) | st.floats(-1e6, 1e6), min_size=1, max_size=4).map(Vector)
    | st.from_regex(r"[a-z]{1,8}", fullmatch=True).map(Place)
)
"""One value of each Firestore type; a `Place` stands for a reference, made on a client."""
KEYS = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,7}", fullmatch=True)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.dictionaries(KEYS, inner, max_size=3)
        | st.lists(inner.filter(lambda v: not isinstance(v, list | Vector)), max_size=3)
    ),
    max_leaves=8,
)


def with_references(value: Any, client: firestore.Client) -> Any:
    """`value` with each `Place` made a reference on `client`."""
    if isinstance(value, Place):
        return client.collection("places").document(value.id)
    if isinstance(value, dict):
        return {k: with_references(v, client) for k, v in value.items()}
    if isinstance(value, list):
        return [with_references(v, client) for v in value]
    return value


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(value=VALUES)
def test_the_first_runs_value_is_the_replays_value(
    make_dedup: MakeDedup, firestore_client: firestore.Client, value: Any
) -> None:
    """First run's value == replay's value, same types all the way down, same fingerprint (the
    second delivery's "use" replays: no `StepMismatch`). The reference a step returns is made
    on another client of the same database, as a handler's own client would."""
    other = firestore.Client(project=PROJECT)
    got, kind = replayed_twice(make_dedup(**SHORT), with_references(value, other))
    assert kind is OutcomeKind.RAN
    assert same(got[0], got[1]), (got[0], got[1])


REFUSED_VALUES: list[tuple[str, Callable[[], Any]]] = [
    ("int-key", lambda: {1: "a"}),
    ("vector-in-array", lambda: {"a": [Vector([1.0])]}),
    ("nested-int-key", lambda: {"a": [{(1, 2): "b"}]}),
    (
        "other-database",
        lambda: firestore.Client(project=PROJECT, database="elsewhere").document("places/p1"),
    ),
]


@pytest.mark.parametrize("make", [r[1] for r in REFUSED_VALUES], ids=[r[0] for r in REFUSED_VALUES])
def test_a_value_no_read_could_give_back_is_refused_after_one_call(
    make_dedup: MakeDedup, read_record: ReadRecord, make: Callable[[], Any]
) -> None:
    calls = [0]

    def fn() -> Any:
        calls[0] += 1
        return make()

    def handler(delivery: Delivery) -> None:
        delivery.step("value", fn)

    outcome = make_dedup(**SHORT).run(event(), SUFFIX, handler)
    assert outcome.kind is OutcomeKind.FAILED
    assert calls == [1]
    record = read_record(outcome.key)
    assert record is not None
    assert record.state is State.FAILED


def test_a_result_or_note_holding_a_reference_to_another_database_leaves_the_record_readable(
    make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """A reference the records' client could not decode is never written: a result holding one
    is stored as null (WARNING), a note holding one is refused (`RecordRefused`, `failed`); so
    every later delivery still reads the record: a duplicate."""
    dedup = make_dedup(**SHORT)
    foreign = firestore.Client(project=PROJECT, database="elsewhere").document("places/p1")
    event_id = event()
    outcome = dedup.run(event_id, SUFFIX, lambda d: {"place": foreign})
    assert outcome.kind is OutcomeKind.RAN
    assert dedup.run(event_id, SUFFIX, lambda d: None).kind is OutcomeKind.DUPLICATE

    def noting(delivery: Delivery) -> None:
        delivery.note(place=foreign)

    noted = event()
    assert dedup.run(noted, SUFFIX, noting).kind is OutcomeKind.FAILED
    assert dedup.run(noted, SUFFIX, noting).kind is OutcomeKind.DUPLICATE


def test_a_vector_inside_an_array_is_refused_before_it_is_written() -> None:
    """Firestore refuses it (`Cannot convert a vector value in an array value`, seen on the
    emulator by `test_a_value_no_read_could_give_back_is_refused_after_one_call`): `refusal`
    says so first, so a result holding one is stored as null and a step's value fails clearly."""
    assert "a Vector directly inside an array at ['a'][0]" in str(refusal({"a": [Vector([1.0])]}))
    assert refusal({"a": [{"v": Vector([1.0])}], "v": Vector([1.0])}) is None


# --- 5. Lambdas and closures are named, not fingerprinted ----------------------------------------


def charge(amount: int) -> str:
    return f"charged {amount}"


def test_a_step_of_a_lambda_warns_once_and_is_replayed_by_its_name(make_dedup: MakeDedup) -> None:
    """The charge lambda is recorded; the next delivery's refund lambda, of the same qualified
    name, is replayed without being called (as docs/steps.md says); the warning names the
    lambda, once."""
    dedup, event_id, calls = make_dedup(**SHORT), event(), []

    def called(what: str) -> str:
        calls.append(what)
        return f"{what}d"

    def handler(delivery: Delivery) -> None:
        if not calls:
            value = delivery.step("pay", lambda: called("charge"))
            raise RuntimeError(f"transient after {value}")
        calls.append(delivery.step("pay", lambda: called("refund")))

    warned = pytest.warns(UserWarning, match=r"step 'pay' calls a lambda .*<lambda>.*charge, 10")
    with warned, pytest.raises(RuntimeError):
        dedup.run(event_id, SUFFIX, handler)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same qualified name: no second warning
        assert dedup.run(event_id, SUFFIX, handler).kind is OutcomeKind.RAN
    assert calls == ["charge", "charged"]


def test_a_closure_warns_and_a_module_function_does_not(make_dedup: MakeDedup) -> None:
    def factory(amount: int) -> Callable[[], str]:
        def inner() -> str:
            return charge(amount)

        return inner

    def handler(delivery: Delivery) -> None:
        delivery.step("by-closure", factory(10))

    with pytest.warns(UserWarning, match="a function defined inside another"):
        make_dedup(**SHORT).run(event(), SUFFIX, handler)

    def plain(delivery: Delivery) -> None:
        delivery.step("plain", charge, 10)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert make_dedup(**SHORT).run(event(), SUFFIX, plain).kind is OutcomeKind.RAN


# --- 6. A short lease leaves a working budget ----------------------------------------------------


def test_a_lease_of_one_second_with_the_default_rpc_timeout_delivers(
    firestore_client: firestore.Client,
) -> None:
    """DEDUP_LEASE_SECONDS=1 and nothing else, on a deduplicator's first delivery (its client
    new): the handler runs and the event is `sent`."""
    config = DedupConfig.from_env({"DEDUP_LEASE_SECONDS": "1", "DEDUP_CACHE_SIZE": "0"})
    dedup = Deduplicator(config, client=firestore.Client(project=PROJECT))
    outcome = dedup.run(event(), SUFFIX, lambda d: {"ok": True})
    assert outcome.kind is OutcomeKind.RAN
    record = dedup.run(outcome.key.rsplit("-", 1)[0], SUFFIX, lambda d: None)
    assert record.kind is OutcomeKind.DUPLICATE


def test_a_five_second_lease_leaves_time_for_a_slow_start(
    firestore_client: firestore.Client,
) -> None:
    """DEDUP_LEASE_SECONDS=5, the RPC timeout unset: 1.5 s pass (by the budget clock) before
    the claim, and the delivery still claims and runs. With the RPC timeout at 10 s its budget
    was the 1 s floor: `BudgetSpent` before the claim, on every delivery so delayed."""
    clock = DrivenClock()
    env = {"DEDUP_LEASE_SECONDS": "5", "DEDUP_CACHE_SIZE": "0"}
    config = replace(DedupConfig.from_env(env), budget_clock=clock)
    dedup = Deduplicator(config, client=firestore_client)

    def slow_start(step: Step, key: str) -> None:
        if step is Step.BEFORE_CLAIM:
            clock.now += 1.5

    dedup.on_step(slow_start)
    assert dedup.run(event(), SUFFIX, lambda d: None).kind is OutcomeKind.RAN


def test_an_event_whose_data_source_and_subject_hold_lone_surrogates_runs_once(
    firestore_client: firestore.Client,
) -> None:
    """A CloudEvent whose JSON data held `"\\ud800"` escapes (decoded to lone surrogates), and
    whose source and subject do too: it used to fail before any record on every delivery (its
    fingerprint could not be encoded), retried for the platform's whole window; it now runs
    once and its redelivery is a duplicate. `Deduplicator.run` with such a payload too."""
    ran: list[object] = []

    @trigger_once("red_team_surrogates")
    def handler(event: object, delivery: Delivery) -> None:
        ran.append(event)

    attributes = {
        "type": "com.example.thing",
        "source": "//example/\ud800",
        "id": event(),
        "subject": "things/\udfff",
    }
    cloud_event = CloudEvent(attributes, {"text": "caf\ud800"})
    handler(cloud_event)
    handler(cloud_event)
    assert len(ran) == 1
    dedup, event_id = Deduplicator(DedupConfig(**SHORT), client=firestore_client), event()
    assert dedup.run(event_id, SUFFIX, lambda d: None, payload="x\ud800").kind is OutcomeKind.RAN
    again = dedup.run(event_id, SUFFIX, lambda d: None, payload="x\ud800")
    assert again.kind is OutcomeKind.DUPLICATE


BEFORE_YEAR_ONE = datetime(1, 1, 1, 2, 0, tzinfo=timezone(timedelta(hours=5)))
"""Year 1 in its own zone, year 0 in UTC: the Firestore client cannot encode it."""


def test_a_result_or_step_holding_a_timestamp_outside_firestores_range_ends_once(
    make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """A result holding it is stored as null and the event ends `sent` after one run (the
    "sent" write used to raise `OverflowError` after the effect: the lease expired and the
    next delivery ran the effect again); a step returning it is refused at once: `failed`."""
    dedup, event_id, runs = make_dedup(**SHORT), event(), [0]

    def handler(delivery: Delivery) -> dict[str, Any]:
        runs[0] += 1
        return {"at": BEFORE_YEAR_ONE}

    assert dedup.run(event_id, SUFFIX, handler).kind is OutcomeKind.RAN
    assert dedup.run(event_id, SUFFIX, handler).kind is OutcomeKind.DUPLICATE
    assert runs == [1]
    calls = [0]

    def stepping(delivery: Delivery) -> None:
        calls[0] += 1
        delivery.step("when", lambda: BEFORE_YEAR_ONE)

    assert dedup.run(event(), SUFFIX, stepping).kind is OutcomeKind.FAILED
    assert calls == [1]


NOTES_REFUSED: list[tuple[str, Any]] = [
    ("reserved-key", {"__x__": 1}),
    ("nested-array", [[1, 2]]),
    ("decimal", Decimal("9.99")),
    ("other-database", "other-database"),
]


@pytest.mark.parametrize("value", [n[1] for n in NOTES_REFUSED], ids=[n[0] for n in NOTES_REFUSED])
def test_a_note_firestore_would_refuse_is_refused_before_any_write(
    read_record: ReadRecord, value: Any
) -> None:
    """`delivery.note` checks its value as Firestore would and raises `RecordRefused` (a
    `TerminalError`: the event ends `failed`) without sending the write: the only write RPCs
    are the claim and the "failed" record. It used to send it and have Firestore refuse it."""
    writes: list[str] = []

    def plan(method: str, number: int) -> Fault:
        if method == "Commit":
            writes.append(method)
        return Fault.PASS

    client = faulty_client(plan)
    if value == "other-database":
        value = firestore.Client(project=PROJECT, database="elsewhere").document("places/p1")
    dedup = Deduplicator(DedupConfig(**SHORT), client=client)

    def handler(delivery: Delivery) -> None:
        delivery.note(value=value)

    outcome = dedup.run(event(), SUFFIX, handler)
    assert outcome.kind is OutcomeKind.FAILED
    assert len(writes) == 2  # the claim, then "failed"
    record = read_record(outcome.key)
    assert record is not None
    assert record.last_error is not None
    assert "nothing was written" in record.last_error
