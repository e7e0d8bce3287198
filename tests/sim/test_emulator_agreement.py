"""The simulated store agrees with the Firestore emulator (pessimistic, as the emulator is) on
scripted scenarios: the same calls give the same records and the same outcomes, so the model
cannot drift from the real thing unnoticed (docs/simulation.md, "On a model, on the emulator").

Each scenario is written once against `Store`, played on `EmulatorStore` (the google client on
the emulator) and on `ModelStore` (`sim.server.Server`, pessimistic), and the two transcripts
are compared. An outcome is "ok" or the error's class; a wait on a lock that ends at the
call's deadline and a lock-timeout abort are both "contended" (both retried by the kernel as
transient: `dedup.kernel.store_errors.TRANSIENT_ERRORS`).

A write whose caller gave up while it waited on a lock may still apply once the lock is
released: the emulator does so at times, under load (its queued write is not withdrawn when
the client's deadline passes), and Firestore promises neither. The model plays each scenario
both ways (`ModelStore(late=...)`, as `sim.world.Faults.late_write` does in the simulator's
runs), and the emulator's transcript must be one of the two: what both stores must agree on
whatever the timing, and nothing that depends on it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, Protocol

import pytest
from google.api_core import exceptions as api
from google.cloud import firestore

from sim.server import PESSIMISTIC, Server, Waits, Write, at, us_of

CONTENDED = (api.Aborted, api.DeadlineExceeded, Waits)


def outcome(call: Callable[[], Any]) -> str:
    try:
        call()
    except CONTENDED:
        return "contended"
    except api.GoogleAPICallError as exc:
        return type(exc).__name__
    return "ok"


class Store(Protocol):
    def create(self, path: str, data: dict[str, Any]) -> Any: ...
    def update(self, path: str, data: dict[str, Any], guard: Any) -> Any: ...
    def set(self, path: str, data: dict[str, Any]) -> Any: ...
    def read(self, path: str) -> tuple[dict[str, Any] | None, Any]: ...
    def begin(self) -> Any: ...
    def txn_read(self, txn: Any, path: str) -> dict[str, Any] | None: ...
    def txn_commit(self, txn: Any, path: str, data: dict[str, Any]) -> Any: ...


class EmulatorStore:
    def __init__(self, client: firestore.Client) -> None:
        self.client = client

    def create(self, path: str, data: dict[str, Any]) -> Any:
        return self.client.document(path).create(data, timeout=5).update_time

    def update(self, path: str, data: dict[str, Any], guard: Any) -> Any:
        option = self.client.write_option(last_update_time=guard)
        return self.client.document(path).update(data, option=option, timeout=5).update_time

    def set(self, path: str, data: dict[str, Any]) -> Any:
        return self.client.document(path).set(data, timeout=2, retry=None).update_time

    def read(self, path: str) -> tuple[dict[str, Any] | None, Any]:
        found = self.client.document(path).get(timeout=5)
        return found.to_dict(), found.update_time

    def begin(self) -> Any:
        transaction = self.client.transaction()
        transaction._begin()
        return transaction

    def txn_read(self, txn: Any, path: str) -> dict[str, Any] | None:
        return self.client.document(path).get(transaction=txn, timeout=5).to_dict()

    def txn_commit(self, txn: Any, path: str, data: dict[str, Any]) -> Any:
        txn.set(self.client.document(path), data)
        return txn._commit()


class ModelStore:
    """The simulated server, called directly on a clock that moves 1 ms a call. With `late`,
    a write that gave up waiting on a lock applies when a commit releases it."""

    def __init__(self, *, late: bool) -> None:
        self.server = Server(PESSIMISTIC)
        self.now = 0
        self.late = late
        self.abandoned: list[Write] = []

    def tick(self) -> int:
        self.now += 1000
        return self.now

    def create(self, path: str, data: dict[str, Any]) -> Any:
        return at(self.server.commit([Write("create", path, data)], self.tick()))

    def update(self, path: str, data: dict[str, Any], guard: Any) -> Any:
        write = Write("update", path, data, us_of(guard))
        return at(self.server.commit([write], self.tick()))

    def set(self, path: str, data: dict[str, Any]) -> Any:
        write = Write("set", path, data)
        try:
            return at(self.server.commit([write], self.tick()))
        except Waits:
            if self.late:
                self.abandoned.append(write)
            raise

    def read(self, path: str) -> tuple[dict[str, Any] | None, Any]:
        data, _, updated = self.server.get(path, self.tick())
        return (dict(data) if data is not None else None), (at(updated) if updated else None)

    def begin(self) -> Any:
        return self.server.begin(self.tick())

    def txn_read(self, txn: Any, path: str) -> dict[str, Any] | None:
        data, _, _ = self.server.get(path, self.tick(), txn)
        return dict(data) if data is not None else None

    def txn_commit(self, txn: Any, path: str, data: dict[str, Any]) -> Any:
        committed = self.server.commit([Write("set", path, data)], self.tick(), txn)
        abandoned, self.abandoned = self.abandoned, []
        for write in abandoned:  # the lock is released: what waited on it applies now
            self.server.commit([write], self.tick())
        return committed


def race_of_two_creates(store: Store, path: str) -> list[Any]:
    return [
        outcome(lambda: store.create(path, {"owner": "a"})),
        outcome(lambda: store.create(path, {"owner": "b"})),
        store.read(path)[0],
    ]


def lost_response(store: Store, path: str) -> list[Any]:
    """A create applied whose answer was lost is tried again: the retry finds the document,
    and a read shows the first try's owner (how the kernel recognises its own write)."""
    store.create(path, {"owner": "mine", "attempts": 1})  # applied; its answer never came
    return [
        outcome(lambda: store.create(path, {"owner": "mine", "attempts": 1})),
        store.read(path)[0],
    ]


def take_over(store: Store, path: str) -> list[Any]:
    """A lease taken over with an update-time precondition; the stale owner's fenced write is
    refused; an update of a missing document under a precondition too."""
    first = store.create(path, {"owner": "a", "state": "in_progress"})
    taken = store.update(path, {"owner": "b"}, first)
    return [
        outcome(lambda: store.update(path, {"state": "sent"}, first)),  # a's write: fenced
        outcome(lambda: store.update(path, {"state": "sent"}, taken)),
        outcome(lambda: store.update(path + "-missing", {"state": "sent"}, first)),
        store.read(path)[0],
    ]


def transaction_conflict(store: Store, path: str) -> list[Any]:
    """A transaction reads a document (pessimistic: it holds its lock); a write of that
    document from outside the transaction waits on the lock until its deadline; the
    transaction then commits its own write of it, and the abandoned write applies after it or
    never (both allowed: the final read is the transaction's value or the abandoned one)."""
    store.create(path, {"n": 0})
    transaction = store.begin()
    seen = store.txn_read(transaction, path)
    outside = outcome(lambda: store.set(path, {"n": 5}))
    committed = outcome(lambda: store.txn_commit(transaction, path, {"n": 1}))
    return [seen, outside, committed, store.read(path)[0]]


def update_by_field_path(store: Store, path: str) -> list[Any]:
    """An update's keys are field paths: `steps.`a.b`` (a name quoted in backticks, holding a
    ".") writes that one entry of the `steps` map and keeps the others, as a step's record
    write does (`dedup.kernel.transitions.steps_recorded`); a path into a missing map makes
    it; a reserved name inside the map is refused."""
    first = store.create(path, {"owner": "a", "steps": {"s0": {"index": 0}}})
    second = store.update(path, {"steps.`s1.x`": {"index": 1}, "owner": "a"}, first)
    third = store.update(path, {"extra.`k`": 1}, second)
    refused = outcome(lambda: store.update(path, {"steps.`__s2__`": {"index": 2}}, third))
    return [refused, store.read(path)[0]]


SCENARIOS = [
    race_of_two_creates,
    lost_response,
    take_over,
    transaction_conflict,
    update_by_field_path,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.__name__ for s in SCENARIOS])
def test_the_model_agrees_with_the_emulator(
    scenario: Callable[[Store, str], list[Any]], firestore_client: firestore.Client
) -> None:
    path = f"agreement/{scenario.__name__}-{uuid.uuid4().hex[:8]}"
    on_emulator = scenario(EmulatorStore(firestore_client), path)
    allowed = [scenario(ModelStore(late=late), path) for late in (False, True)]
    assert on_emulator in allowed, f"the emulator gave {on_emulator}; the model allows {allowed}"


def test_an_abandoned_write_is_allowed_both_ways() -> None:
    """The model's two transcripts of the lock scenario differ exactly in the final read: the
    test above could not tell a late write from an early one otherwise."""
    never, late = (transaction_conflict(ModelStore(late=x), "agreement/x") for x in (False, True))
    assert never[:3] == late[:3] == [{"n": 0}, "contended", "ok"]
    assert (never[3], late[3]) == ({"n": 1}, {"n": 5})
