"""`dedup.testing.crash_at_step` and `deliver_after_crash` take what a user has: the function as
written (`@firestore_fn.on_document_created` over `@trigger_once`, or `@trigger_once` alone) with
its event; they know which boundaries each kind of step has; a wrong shape is told the two
shapes and what it gave. And `testing.firestore_emulator()` uses the project the handler's
`delivery.client` uses, with or without GOOGLE_CLOUD_PROJECT.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from cloudevents.http import CloudEvent, from_http
from firebase_functions import firestore_fn
from google.cloud import firestore

from dedup import (
    DedupConfig,
    Deduplicator,
    Delivery,
    OutcomeKind,
    Step,
    StepInterrupted,
    SuffixRegistry,
    testing,
    trigger_once,
)
from tests.dedup.support import standing_clock
from tests.memory_store import MemoryStore

LEASE = 1


def three_steps(calls: Counter[str]) -> Any:
    """A handler of (event, delivery): a transactional, a keyed and an at-most-once step,
    counting each call of each step's function."""

    def reserve(transaction: Any) -> str:
        calls["reserve"] += 1
        return "reserved"

    def charge(key: str) -> str:
        calls["charge"] += 1
        return key

    def receipt() -> None:
        calls["receipt"] += 1

    def handler(event: Any, delivery: Delivery) -> None:
        delivery.step("reserve", reserve, transactional=True)
        delivery.step("charge", charge, delivery.step_key("charge"))
        try:
            delivery.step("receipt", receipt, on_interrupted="skip")
        except StepInterrupted:
            calls["interrupted"] += 1

    return handler


def memory_function(calls: Counter[str]) -> Any:
    """`three_steps` under `@trigger_once` alone, on an in-memory store."""
    # The 1 s lease is waited out for real; the deliveries' own clock stands still, so a busy
    # machine's pause never makes one give its lease back before a step (support.py).
    config = DedupConfig(lease_seconds=LEASE, cache_size=0, budget_clock=standing_clock)
    dedup = Deduplicator(config, records=MemoryStore("triggerEvents", rpc_timeout_seconds=1))
    return trigger_once("orders", deduplicator=dedup, registry=SuffixRegistry())(three_steps(calls))


def cloud_event() -> CloudEvent:
    """A CloudEvent of a new id, as functions-framework passes one."""
    attributes = {"id": uuid.uuid4().hex, "source": "//tests", "type": "tests.order"}
    return CloudEvent(attributes, {"order": 1})


def test_a_transactional_steps_missing_boundary_is_named_not_ended_before() -> None:
    """A transactional step has no after_step_call: asked for it, the delivery runs to its end
    and the `Crash` names the step and its kind; the other kinds' boundaries all die; a step
    past the last is told the delivery ran to its end, never that it "ended before"; an event
    already recorded is told it was not run; the parameters may be given by name."""
    assert testing.BOUNDARIES_OF_KIND["transactional"] == (Step.BEFORE_STEP, Step.AFTER_STEP_RECORD)
    calls: Counter[str] = Counter()
    function = memory_function(calls)
    for step in (1, 2, 3):
        for at in testing.STEP_BOUNDARIES:
            crash = testing.crash_at_step(function, cloud_event(), step=step, at=at)
            missing = (step, at) == (1, Step.AFTER_STEP_CALL)
            assert crash.died is not missing, crash
            if missing:
                assert "step 1 ('reserve') is transactional" in crash.why
                assert "ran to its end" in crash.why
    with pytest.raises(AssertionError, match="ran to its end having run 3") as told:
        testing.crash_at_step(function, cloud_event(), step=4, at=Step.BEFORE_STEP)
    assert "ended before" not in str(told.value)
    by_name = testing.crash_at_step(function=function, event=cloud_event(), step=2)
    assert by_name.died, by_name
    delivered = cloud_event()
    function(delivered)
    with pytest.raises(AssertionError, match="did not run the handler: its outcome is duplicate"):
        testing.crash_at_step(function, delivered, step=1, at=Step.BEFORE_STEP)


def test_a_wrong_shape_is_told_both_shapes_and_what_it_gave() -> None:
    """The decorated function given with an event id and a suffix, a handler of (event,
    delivery) given where one of (delivery) is called, a function without @trigger_once, a
    firebase-functions function given something else than a CloudEvent: each a `TypeError`
    naming the shape expected and the one received, never an attribute of the library."""
    dedup = Deduplicator(DedupConfig(lease_seconds=LEASE), records=MemoryStore("triggerEvents"))
    registry = SuffixRegistry()

    @firestore_fn.on_document_created(document="orders/{orderId}")
    @trigger_once("placeOrder", deduplicator=dedup, registry=registry)
    def place_order(event: Any, delivery: Delivery) -> None:
        pass

    told = [
        ((dedup, "order-1", "placeOrder", place_order), "place_order is a @trigger_once function"),
        ((dedup, "order-1", "placeOrder", lambda event, delivery: None), "calls handler(delivery)"),
        ((lambda event, delivery: None, cloud_event()), "is not a @trigger_once function"),
        ((place_order, {"id": "x"}), "not a builtins.dict"),
        ((dedup, cloud_event()), "it was given (Deduplicator, a cloudevents.http"),
    ]
    for call, named in told:
        for helper in (testing.crash_at_step, testing.deliver_after_crash):
            with pytest.raises(TypeError) as refused:
                helper(*call, step=1, at=Step.BEFORE_STEP)
            assert named in str(refused.value), refused.value
            assert "(function, event)" in str(refused.value) or "event, step=" in str(
                refused.value
            ), refused.value


def test_a_firebase_functions_event_goes_to_the_function_under_its_decorator() -> None:
    """The event firebase-functions makes (`firestore_fn.Event`), given with the decorated
    function, is passed as the SDK passes it: the delivery dies at the boundary asked for."""
    calls: Counter[str] = Counter()
    inner = memory_function(calls)
    function = firestore_fn.on_document_created(document="orders/{orderId}")(inner)
    event = firestore_fn.Event(
        specversion="1.0", id=uuid.uuid4().hex, type="google.cloud.firestore.document.v1.created",
        source="//firestore.googleapis.com/projects/demo-p/databases/(default)",
        time=datetime.now(UTC), data=None, subject="documents/orders/o1", location="nam5",
        project="demo-p", database="(default)", namespace="(default)", document="orders/o1",
        params={"orderId": "o1"},
    )  # fmt: skip
    crash = testing.crash_at_step(function, event, step=2, at=Step.AFTER_STEP_CALL)
    assert crash.died, crash
    assert calls == Counter(reserve=1, charge=1)


def seeded(db: firestore.Client, order_id: str) -> testing.HttpEvent:
    """10 in stock and the order created; the created event, as `testing` builds it."""
    db.document("stock/coffee").set({"available": 10})
    order = {"item": "coffee", "quantity": 2}
    db.document(f"orders/{order_id}").set(order)
    return testing.firestore_event(f"orders/{order_id}", None, order, change="created")


def test_the_decorated_function_with_its_event_survives_a_crash_at_each_kinds_boundary(
    firestore_host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the emulator, with neither GOOGLE_CLOUD_PROJECT nor GCLOUD_PROJECT: a function as a
    user writes it (`@firestore_fn.on_document_created` over `@trigger_once`) and the event
    `testing.firestore_event` builds, a crash after the call of each of its three steps, then the
    delivery after it: the stock moves once, the keyed call is made again only after a death
    between its call and its record, the receipt is never sent twice, and every outcome is
    `ran`. What the test writes through `firestore_emulator()` the handler reads."""
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    monkeypatch.delenv("GCLOUD_PROJECT", raising=False)
    emulator = testing.firestore_emulator()
    assert emulator.project == testing.CLIENT_EMULATOR_PROJECT
    db = emulator.client()
    dedup = Deduplicator(DedupConfig(lease_seconds=LEASE))  # its client: no project given
    calls: Counter[str] = Counter()

    def reserve(transaction: Any, client: firestore.Client, order: dict[str, Any]) -> int:
        stock = client.document(f"stock/{order['item']}")
        available = stock.get(transaction=transaction).get("available")
        transaction.update(stock, {"available": available - order["quantity"]})
        return int(available)

    def charge(key: str) -> str:
        calls["charge"] += 1
        return key

    def receipt() -> None:
        calls["receipt"] += 1

    @firestore_fn.on_document_created(document="orders/{orderId}")
    @trigger_once("bookOrder", deduplicator=dedup, registry=SuffixRegistry())
    def book(event: Any, delivery: Delivery) -> None:
        order = event.data.to_dict()
        delivery.step("reserve", reserve, delivery.client, order, transactional=True)
        delivery.step("charge", charge, delivery.step_key("charge"))
        try:
            delivery.step("receipt", receipt, on_interrupted="skip")
        except StepInterrupted:
            calls["interrupted"] += 1

    # The boundaries where the kinds differ (every boundary: tests/docs/test_steps_page.py and
    # tests/packaging/test_steps_journey.py): none for the transactional step, a second call of
    # the keyed one, an interrupted at-most-once one.
    for step in (1, 2, 3):
        at = Step.AFTER_STEP_CALL
        calls.clear()
        event = seeded(db, f"o-{step}-{at.value}")
        outcome = testing.deliver_after_crash(book, event, step=step, at=at)
        assert outcome.kind is OutcomeKind.RAN, (step, at, outcome)
        assert db.document("stock/coffee").get().get("available") == 8, (step, at)
        assert calls["charge"] == (2 if (step, at) == (2, Step.AFTER_STEP_CALL) else 1)
        interrupted = (step, at) == (3, Step.AFTER_STEP_CALL)
        assert calls["receipt"] == 1, (step, at)
        assert calls["interrupted"] == int(interrupted), (step, at)
    emulator.clear()
    assert not db.document("stock/coffee").get().exists


def test_the_testing_project_and_the_handlers_project_cannot_part(
    firestore_host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without either project variable, a document written through `firestore_emulator()` is
    read by a handler's `delivery.client`; settings that would give them two projects are
    refused at once, naming them: the two variables apart, or another project asked for."""
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    monkeypatch.delenv("GCLOUD_PROJECT", raising=False)
    seen: list[Any] = []
    path = f"rooms/{uuid.uuid4().hex}"
    testing.firestore_emulator().client().document(path).set({"free": 3})

    @trigger_once("readRoom", deduplicator=Deduplicator(DedupConfig()), registry=SuffixRegistry())
    def read_room(event: Any, delivery: Delivery) -> None:
        seen.append(delivery.client.document(path).get().to_dict())

    event = testing.custom_event("tests.room", {"room": path})
    read_room(from_http(dict(event.headers), event.body))
    assert seen == [{"free": 3}]

    with pytest.raises(ValueError, match="two databases") as other:
        testing.firestore_emulator("demo-other")
    assert testing.CLIENT_EMULATOR_PROJECT in str(other.value)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "demo-a")
    monkeypatch.setenv("GCLOUD_PROJECT", "demo-b")
    with pytest.raises(ValueError, match="GOOGLE_CLOUD_PROJECT is 'demo-a' and GCLOUD_PROJECT"):
        testing.firestore_emulator()
