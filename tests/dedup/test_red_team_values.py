"""Values Firestore refuses, at each write of the record, on the
Firestore emulator, as the red team ran them: short leases, the platform delivering again
after every exception until a delivery returns.

* A handler result Firestore cannot hold in the record (170,000 zeros: 340 KB of JSON, 1.36 MB
  to Firestore; a `Decimal`; a reserved key; nested arrays) ends `sent` after one handler run,
  with the result stored as null and a WARNING naming the record. It used to be refused with
  "sent", taken over when the lease expired and run again until the event was `dead`.
* A step whose value Firestore cannot store, or would store as another type (`Decimal`, `set`,
  `tuple`, nested arrays), or whose name Firestore reserves (`__s0__`), calls its function at
  most once and the event ends `failed`; an at-most-once step's end is recorded first, so no
  later delivery reports it interrupted. They used to run three times and end `dead`.
* A record that would pass Firestore's 1 MiB document with a step's value (each step within
  the limits), and steps past the limits as Firestore measures them: the same.
* A record write refused with INVALID_ARGUMENT (not an expired transaction), or that the
  client cannot encode (a note holding a `Decimal`), is terminal, sync and async: it used to
  be `StoreUnavailable`, retried until the lease's deadline and then by the platform.

The measure itself is checked against the emulator: a document of exactly 1 MiB by
`dedup.platform.firestore_values` is stored, one byte more is refused, and every value it
refuses is refused by the emulator or the client.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud import firestore

from dedup import (
    AsyncDeduplicator,
    AsyncDelivery,
    DedupConfig,
    Deduplicator,
    Delivery,
    Mode,
    Outcome,
    OutcomeKind,
    Record,
    State,
    StepInterrupted,
)
from dedup.kernel.steps import MAX_STEP_BYTES
from dedup.kernel.transitions import revived
from dedup.platform.firestore_values import MAX_DOCUMENT_BYTES, document_size, refusal
from tests.dedup.grpc_faults import Fault, faulty_client, nth
from tests.dedup.support import standing_clock

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

Seen = list[Outcome | BaseException]


def deliver_until_settled(
    dedup: Deduplicator, event_id: str, handler: Callable[[Delivery], Any], **options: Any
) -> Seen:
    """Deliver `event_id` as the platform would: again after each exception, once the lease
    may have expired, until a delivery returns (at most 5 deliveries)."""
    seen: Seen = []
    for _ in range(5):
        try:
            outcome = dedup.run(event_id, SUFFIX, handler, **options)
        except Exception as exc:
            seen.append(exc)
            time.sleep(LEASE + 0.5)
            continue
        seen.append(outcome)
        break
    return seen


def settled(seen: Seen, kind: OutcomeKind) -> None:
    """The first delivery returned `kind`: nothing was retried."""
    assert len(seen) == 1, seen
    assert isinstance(seen[0], Outcome), seen
    assert seen[0].kind is kind, seen


def add_effect(delivery: Delivery) -> None:
    """The handler's effect, one document in `effects`, written the way its mode commits."""
    ref = delivery.client.collection("effects").document()
    writer = delivery.transaction if delivery.transaction is not None else delivery.batch
    if writer is not None:
        writer.create(ref, {"key": delivery.key})
    else:
        ref.create({"key": delivery.key})


def counted(calls: Counter[str], name: str, value: Any) -> Callable[..., Any]:
    """A step's function that counts its calls in `calls[name]` and returns `value`."""

    def fn(*args: Any) -> Any:
        calls[name] += 1
        return value

    return fn


def effects(client: firestore.Client) -> int:
    return sum(1 for _ in client.collection("effects").list_documents())


# --- 2. "Sent" always fits ---------------------------------------------------------------------

RESULTS: list[tuple[str, dict[str, Any], str]] = [
    ("zeros", {"zeros": [0] * 170_000}, "not stored"),
    ("decimal", {"price": Decimal("9.99")}, "a Decimal at ['price']"),
    ("reserved", {"__id__": "x"}, "the map key '__id__'"),
    ("nested", {"rows": [[1, 2], [3]]}, "nested arrays"),
]


@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize(("name", "result", "logged"), RESULTS, ids=[r[0] for r in RESULTS])
def test_a_result_firestore_cannot_hold_ends_sent_with_null_after_one_run(
    mode: Mode,
    name: str,
    result: dict[str, Any],
    logged: str,
    make_dedup: MakeDedup,
    read_record: ReadRecord,
    firestore_client: firestore.Client,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The effect happened: "sent" is recorded with the result null, a WARNING names the
    record, and duplicates get no result. The handler ran once, in every mode."""
    calls = Counter[str]()

    def handler(delivery: Delivery) -> dict[str, Any]:
        calls[name] += 1
        add_effect(delivery)
        return result

    caplog.set_level(logging.WARNING, logger="dedup")
    seen = deliver_until_settled(make_dedup(**SHORT), name, handler, mode=mode)
    settled(seen, OutcomeKind.RAN)
    assert (calls[name], effects(firestore_client)) == (1, 1)
    record = read_record(f"{name}-{SUFFIX}")
    assert record is not None
    assert (record.state, record.result) == (State.SENT, None)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"triggerEvents/{name}-{SUFFIX}" in m and logged in m for m in warnings), warnings
    again = make_dedup(**SHORT).run(name, SUFFIX, handler, mode=mode)
    assert (again.kind, again.result, effects(firestore_client)) == (OutcomeKind.DUPLICATE, None, 1)
    assert calls[name] == (2 if mode is Mode.WRITE_ONLY else 1)  # a blind batch, not committed


def test_a_result_that_fits_alone_but_not_with_the_steps_is_not_stored(
    make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """The result is measured with the record around it: 500 KB of notes and a step of 60 KB
    leave no room for a 500 KB result (each within its own limit), so "sent" is written
    without it."""
    block = [0] * (60_000 // 8)

    def handler(delivery: Delivery) -> dict[str, Any]:
        delivery.note(blob="n" * 500_000)
        delivery.step("s0", lambda: block)
        return {"blob": "x" * 500_000}

    settled(deliver_until_settled(make_dedup(**SHORT), "room", handler), OutcomeKind.RAN)
    record = read_record(f"room-{SUFFIX}")
    assert record is not None
    assert record.steps is not None
    assert (record.state, record.result, list(record.steps)) == (State.SENT, None, ["s0"])


def test_a_sent_refused_with_its_result_is_written_without_it(
    make_dedup: MakeDedup,
    read_record: ReadRecord,
    firestore_client: firestore.Client,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A record holding a field this version does not measure (written by another version,
    or by hand) can make "sent" with a result that measured as fitting too large: Firestore
    refuses it, and "sent" is written again with the result null."""
    calls = Counter[str]()

    def handler(delivery: Delivery) -> dict[str, Any]:
        calls["run"] += 1
        record = firestore_client.collection("triggerEvents").document(delivery.key)
        record.update({"fromAnotherVersion": "x" * 700_000})
        return {"blob": "y" * 400_000}

    caplog.set_level(logging.WARNING, logger="dedup")
    settled(deliver_until_settled(make_dedup(**SHORT), "other", handler), OutcomeKind.RAN)
    assert calls["run"] == 1
    record = read_record(f"other-{SUFFIX}")
    assert record is not None
    assert (record.state, record.result) == (State.SENT, None)
    assert "handler result not stored" in caplog.text


# --- 3. Step values and names checked before they are written ----------------------------------

STEP_VALUES: list[tuple[str, Any, str]] = [
    ("decimal", Decimal("9.99"), "a Decimal"),
    ("set", {"a", "b"}, "a set"),
    ("tuple", ("a", 1), "a tuple"),
    ("nested", {"rows": [[1, 2], [3]]}, "nested arrays"),
]
KINDS: dict[str, dict[str, Any]] = {
    "plain": {},
    "at_most_once": {"on_interrupted": "skip"},
    "transactional": {"transactional": True},
}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize(("name", "value", "what"), STEP_VALUES, ids=[v[0] for v in STEP_VALUES])
def test_a_step_value_firestore_cannot_store_runs_once_and_the_event_fails(
    kind: str, name: str, value: Any, what: str, make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """The step's function runs once, nothing is retried, the event ends `failed` with an
    error naming the step, the type and the reason. An at-most-once step's end is recorded
    (without its value) before the error; plain and transactional steps record nothing."""
    calls = Counter[str]()

    def charge(*args: Any) -> Any:
        calls["charge"] += 1
        return value

    def handler(delivery: Delivery) -> None:
        delivery.step("charge", charge, **KINDS[kind])

    seen = deliver_until_settled(make_dedup(**SHORT), name, handler)
    settled(seen, OutcomeKind.FAILED)
    assert calls["charge"] == 1
    record = read_record(f"{name}-{SUFFIX}")
    assert record is not None
    assert record.state is State.FAILED
    assert record.last_error is not None
    assert "RecordRefused" in record.last_error
    assert "step 'charge'" in record.last_error
    assert what in record.last_error
    steps = record.steps or {}
    if kind == "at_most_once":
        entry = dict(steps["charge"])
        assert entry.pop("fn").endswith("charge")  # the call's fingerprint (docs/steps.md)
        assert isinstance(entry.pop("args"), str)
        assert (set(steps), entry) == ({"charge"}, {"index": 0, "state": "done", "refused": True})
    else:
        assert steps == {}
    again = make_dedup(**SHORT).run(name, SUFFIX, handler)
    assert (again.kind, calls["charge"]) == (OutcomeKind.DUPLICATE, 1)


def test_a_step_name_firestore_reserves_is_refused_before_its_function_runs(
    make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """`__s0__` passes the name rule's characters, but Firestore reserves it as a field name:
    `delivery.step` refuses it before calling anything, and the event ends `failed`."""
    calls = Counter[str]()

    def handler(delivery: Delivery) -> None:
        delivery.step("__s0__", lambda: calls.update(["step"]))

    settled(deliver_until_settled(make_dedup(**SHORT), "reserved", handler), OutcomeKind.FAILED)
    assert calls["step"] == 0
    record = read_record(f"reserved-{SUFFIX}")
    assert record is not None
    assert record.last_error is not None
    assert (record.state, record.steps) == (State.FAILED, None)
    assert "'__s0__'" in record.last_error
    assert "reserves" in record.last_error


def test_steps_over_the_limits_as_firestore_counts_run_at_most_once(
    make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """Seven steps of 21,000 zeros: 42 KB of JSON each (within the old limits), 168 KB to
    Firestore, whose record passed 1 MiB at the seventh, which ran three times before the
    event was `dead`. Measured as Firestore measures, the first is over `MAX_STEP_BYTES`: it
    ran once and the event is `failed`; no step runs twice."""
    calls = Counter[str]()
    block = [0] * 21_000

    def handler(delivery: Delivery) -> None:
        for n in range(7):
            delivery.step(f"s{n}", counted(calls, f"s{n}", block))

    settled(deliver_until_settled(make_dedup(**SHORT), "ints", handler), OutcomeKind.FAILED)
    assert max(calls.values()) == 1
    assert calls == {"s0": 1}
    record = read_record(f"ints-{SUFFIX}")
    assert record is not None
    assert record.last_error is not None
    assert record.state is State.FAILED
    assert "StepTooLarge" in record.last_error
    assert f"over {MAX_STEP_BYTES}" in record.last_error


def test_a_step_that_would_take_the_record_past_one_mib_runs_once_and_fails(
    make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """Each step within the limits (64,000 bytes; 450 KB together), but the record, with 650 KB
    of notes, would pass Firestore's 1 MiB at the seventh: that step's function ran once, its
    value is not recorded, the six before it are kept and the event is `failed`."""
    calls = Counter[str]()
    block = [0] * 8_000  # 64,000 bytes to Firestore

    def handler(delivery: Delivery) -> None:
        delivery.note(blob="n" * 650_000)
        for n in range(8):
            delivery.step(f"s{n}", counted(calls, f"s{n}", block))

    # Eight record writes of up to 1 MiB: on a standing budget clock with a 30 s lease, so a
    # busy machine's slow writes never spend the delivery's budget before the seventh step
    # (with SHORT's 2 s budget, a loaded emulator once left step s4 unstarted).
    roomy = {**SHORT, "lease_seconds": 30, "rpc_timeout_seconds": 10}
    dedup = make_dedup(**roomy, budget_clock=standing_clock)
    settled(deliver_until_settled(dedup, "mib", handler), OutcomeKind.FAILED)
    assert calls == {f"s{n}": 1 for n in range(7)}
    record = read_record(f"mib-{SUFFIX}")
    assert record is not None
    assert record.last_error is not None
    assert record.steps is not None
    assert (record.state, sorted(record.steps)) == (State.FAILED, [f"s{n}" for n in range(6)])
    assert "over Firestore's 1048576" in record.last_error


def test_an_at_most_once_step_that_returned_is_never_reported_interrupted(
    make_dedup: MakeDedup, read_record: ReadRecord, firestore_client: firestore.Client
) -> None:
    """The red team's email: sent, its function returned a `Decimal`. The delivery records
    the step's end (without the value) and ends `failed`; the next delivery is a duplicate,
    not `StepInterrupted` for an email that was sent. Revived by an operator, the step is not
    sent again: its replay is refused (it has no value to give), never reported interrupted."""
    sent: list[str] = []

    def email(to: str) -> Decimal:
        sent.append(to)
        return Decimal("0.01")  # what the provider charged

    def handler(delivery: Delivery) -> None:
        try:
            delivery.step("email", email, "ada@example.com", on_interrupted="skip")
        except StepInterrupted:
            sent.append("interrupted")
            raise

    dedup = make_dedup(**SHORT)
    settled(deliver_until_settled(dedup, "email", handler), OutcomeKind.FAILED)
    assert sent == ["ada@example.com"]
    assert dedup.run("email", SUFFIX, handler).kind is OutcomeKind.DUPLICATE
    firestore_client.collection("triggerEvents").document(f"email-{SUFFIX}").update(revived())
    settled(deliver_until_settled(dedup, "email", handler), OutcomeKind.FAILED)
    assert sent == ["ada@example.com"]
    record = read_record(f"email-{SUFFIX}")
    assert record is not None
    assert record.last_error is not None
    assert "ran on an earlier delivery" in record.last_error


# --- A record write refused as invalid is terminal -------------------------------------------


def test_a_record_write_refused_with_invalid_argument_is_terminal(
    firestore_host: str, read_record: ReadRecord
) -> None:
    """A step's record write answered INVALID_ARGUMENT (a conditional write is no transaction,
    so it is not an expired one) fails the event at once: its function ran once. It was
    `StoreUnavailable`, retried until the lease's deadline, then by the platform."""
    client = faulty_client(nth("Commit", {2}, Fault.INVALID))  # 1: the claim, 2: the step
    dedup = Deduplicator(DedupConfig(**SHORT), client=client)
    calls = Counter[str]()

    def handler(delivery: Delivery) -> None:
        delivery.step("charge", lambda: calls.update(["charge"]))

    settled(deliver_until_settled(dedup, "invalid", handler), OutcomeKind.FAILED)
    assert calls["charge"] == 1
    record = read_record(f"invalid-{SUFFIX}")
    assert record is not None
    assert record.last_error is not None
    assert record.state is State.FAILED
    assert "RecordRefused" in record.last_error
    assert "InvalidArgument" in record.last_error


@pytest.mark.parametrize(
    ("name", "noted"), [("decimal", Decimal("1")), ("nested", [[1]]), ("bad_key", {"": 1})]
)
def test_a_note_firestore_refuses_fails_the_event_before_its_effect(
    name: str, noted: Any, make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """`delivery.note` of a value the client cannot encode (`TypeError`, `ValueError`) or
    Firestore refuses (400): terminal, the handler ran once and its effect, after the note,
    never ran."""
    calls = Counter[str]()

    def handler(delivery: Delivery) -> None:
        calls["handler"] += 1
        delivery.note(ref=noted)
        calls["effect"] += 1

    settled(deliver_until_settled(make_dedup(**SHORT), name, handler), OutcomeKind.FAILED)
    assert calls == {"handler": 1}
    record = read_record(f"{name}-{SUFFIX}")
    assert record is not None
    assert record.last_error is not None
    assert (record.state, "RecordRefused" in record.last_error) == (State.FAILED, True)


def test_the_async_client_refuses_the_same_way(
    make_async_dedup: MakeAsyncDedup, read_record: ReadRecord
) -> None:
    """Over an `AsyncClient` a refused record write (400 from the server, `TypeError` from
    the encoder) and a refused step value are terminal too."""
    calls = Counter[str]()

    async def nested_note(delivery: AsyncDelivery) -> None:
        calls["nested"] += 1
        await delivery.note(rows=[[1]])

    async def decimal_note(delivery: AsyncDelivery) -> None:
        calls["decimal"] += 1
        await delivery.note(price=Decimal("1"))

    async def decimal_step(delivery: AsyncDelivery) -> None:
        async def charge() -> Decimal:
            calls["step"] += 1
            return Decimal("1")

        await delivery.step("charge", charge)

    async def deliver() -> list[Outcome]:
        dedup = make_async_dedup(**SHORT)
        handlers = {"nested": nested_note, "decimal": decimal_note, "step": decimal_step}
        return [await dedup.run(name, SUFFIX, handler) for name, handler in handlers.items()]

    outcomes = asyncio.run(deliver())
    assert [o.kind for o in outcomes] == [OutcomeKind.FAILED] * 3
    assert calls == {"nested": 1, "decimal": 1, "step": 1}
    for name in ("nested", "decimal", "step"):
        record = read_record(f"{name}-{SUFFIX}")
        assert record is not None
        assert record.last_error is not None
        assert "RecordRefused" in record.last_error


# --- The measure agrees with the emulator ------------------------------------------------------


def test_a_document_of_one_mib_by_the_measure_is_stored_one_byte_more_is_not(
    firestore_client: firestore.Client,
) -> None:
    """Integers (8 bytes each) up to exactly 1,048,576 bytes by `document_size` are stored;
    the same document one string byte larger is refused for its size."""
    path = "probe/one-mib"
    ref = firestore_client.document(path)
    base = document_size(path, {"n": [], "pad": ""})
    count, rest = divmod(MAX_DOCUMENT_BYTES - base, 8)
    fields = {"n": [0] * count, "pad": "p" * rest}
    assert document_size(path, fields) == MAX_DOCUMENT_BYTES
    ref.set(fields)
    with pytest.raises(api_exceptions.InvalidArgument):
        ref.set({"n": [0] * count, "pad": "p" * (rest + 1)})


def test_every_value_the_measure_refuses_is_refused_by_firestore(
    firestore_client: firestore.Client,
) -> None:
    """What `refusal` refuses as unstorable is refused by the emulator (400) or the client's
    encoder; what it refuses as converted is stored and read back as another value."""
    ref = firestore_client.collection("probe").document("values")
    unstorable = [
        Decimal("1"),
        [[1]],
        {"__x__": 1},
        {"": 1},
        {1: "a"},
        "\ud800",
        2**63,
        bytearray(b"x"),
        {"x" * 1_500: 1},
    ]
    for value in unstorable:
        assert refusal(value, at=("v",)) is not None, value
        with pytest.raises((api_exceptions.InvalidArgument, TypeError, ValueError)):
            ref.set({"v": value})
    naive = datetime(2024, 1, 1)  # noqa: DTZ001 - the point: a datetime without a timezone
    converted: list[Any] = [{"b", "a"}, ("a", 1), naive]
    for value in converted:
        assert refusal(value) is not None, value
        ref.set({"v": value})
        back = ref.get().to_dict()
        assert back is not None
        assert back["v"] != value or type(back["v"]) is not type(value), value
