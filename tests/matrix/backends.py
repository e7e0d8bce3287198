"""Where the matrix runs: the in-memory store, or the Firestore emulator; and `play`, which
plays one case on either.

Both backends inject faults through the same `Plan` (`tests.dedup.grpc_faults`): the memory
store applies it to its own RPCs, the emulator backend to the gRPC calls of its clients, one
interceptor shared by every instance of a case (so "the second Commit" means the same thing).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from google.cloud import firestore

from dedup import DedupConfig, Deduplicator, Mode, Record, TerminalError
from dedup.aio import AsyncDeduplicator
from dedup.kernel.record import Field, State
from dedup.kernel.transitions import SERVER_TIMESTAMP, dedup_key, new_record
from tests.dedup.aio_faults import AsyncFaultInterceptor, FaultyAsyncClient
from tests.dedup.grpc_faults import FaultInterceptor, FaultyClient, Plan
from tests.matrix.cases import LEASE_SECONDS, MAX_ATTEMPTS, Point, Result
from tests.matrix.kinds import ASYNC_KINDS, SUFFIX, Crash, Entrance, entrance
from tests.memory_store import AsyncMemoryStore, MemoryStore

COLLECTION = "triggerEvents"
EFFECTS = "effects"
HTTP_KINDS = frozenset({"http", "callable"})


class Backend(Protocol):
    """What `play` needs of a store."""

    def deduplicator(self, config: DedupConfig, kind: str) -> Deduplicator | AsyncDeduplicator:
        """A new instance's deduplicator for `kind`."""
        ...

    def seed(self, key: str, fields: dict[str, Any]) -> None:
        """Write a record before the case starts (outside the fault plan)."""
        ...

    def record(self, key: str) -> Record | None:
        """The record now."""
        ...

    def documents(self, collection: str) -> int:
        """How many documents `collection` holds."""
        ...

    def expire(self) -> None:
        """Let every lease expire on the database clock."""
        ...


class MemoryBackend:
    """The in-memory store (`tests.memory_store`): leases expire by moving its clock."""

    def __init__(self, plan: Plan) -> None:
        self.store = MemoryStore(COLLECTION, plan=plan)

    def deduplicator(self, config: DedupConfig, kind: str) -> Deduplicator | AsyncDeduplicator:
        if kind in ASYNC_KINDS:
            return AsyncDeduplicator(config, records=AsyncMemoryStore(self.store))
        return Deduplicator(config, records=self.store.instance())

    def seed(self, key: str, fields: dict[str, Any]) -> None:
        self.store.put(self.store.path(key), fields)

    def record(self, key: str) -> Record | None:
        return Record.from_snapshot(self.store.document(self.store.path(key)))

    def documents(self, collection: str) -> int:
        return sum(1 for path in self.store.paths() if path.startswith(collection + "/"))

    def expire(self) -> None:
        self.store.clock.advance(LEASE_SECONDS + 1)


class EmulatorBackend:
    """The Firestore emulator: faults through gRPC interceptors, leases expire by waiting."""

    def __init__(self, plan: Plan, client: firestore.Client) -> None:
        self.client = client
        self.interceptor = FaultInterceptor(plan)
        self.async_interceptor = AsyncFaultInterceptor(plan)

    def deduplicator(self, config: DedupConfig, kind: str) -> Deduplicator | AsyncDeduplicator:
        if kind in ASYNC_KINDS:
            interceptor = self.async_interceptor
            return AsyncDeduplicator(config, client_factory=lambda: FaultyAsyncClient(interceptor))
        return Deduplicator(config, client=FaultyClient(self.interceptor))

    def seed(self, key: str, fields: dict[str, Any]) -> None:
        self.client.collection(COLLECTION).document(key).set(fields)

    def record(self, key: str) -> Record | None:
        return Record.from_snapshot(self.client.collection(COLLECTION).document(key).get())

    def documents(self, collection: str) -> int:
        return sum(1 for _ in self.client.collection(collection).list_documents())

    def expire(self) -> None:
        time.sleep(LEASE_SECONDS + 0.3)


def config_for(kind: str, point: Point) -> DedupConfig:
    """The matrix's config: short leases, few attempts, no key cache (every delivery reads the
    store); HTTP kinds refuse reused keys, as they require."""
    config = DedupConfig(
        collection=COLLECTION,
        lease_seconds=LEASE_SECONDS,
        max_attempts=MAX_ATTEMPTS,
        min_retry_seconds=0,
        cache_size=0,
        rpc_timeout_seconds=1,
        **point.settings,
    )
    if kind in HTTP_KINDS:
        config = replace(config, on_payload_mismatch="raise")
    return config


@dataclass
class _Case:
    """The state of one case being played."""

    backend: Backend
    kind: str
    mode: Mode
    config: DedupConfig
    event_id: str
    answers: list[str] = field(default_factory=list)
    effects: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, answer: str) -> None:
        with self.lock:
            self.answers.append(answer)


def play(backend: Backend, mode: Mode, kind: str, point: Point) -> Result:
    """Play `point`'s steps for `mode` and `kind` on `backend`; how it ended."""
    case = _Case(backend, kind, mode, config_for(kind, point), f"m-{uuid.uuid4().hex[:12]}")
    key = dedup_key(case.event_id, SUFFIX, case.config.key_layout)
    current = _instance(case, "ok")
    for step in point.steps:
        action = step[0]
        if action == "seed":
            backend.seed(key, _seeded(case, step[1]))
        elif action == "expire":
            backend.expire()
            current = _instance(case, "ok")
        elif action == "storm":
            _storm(case, step[1])
        else:
            behaviour = step[1]
            target = _instance(case, behaviour) if behaviour != "ok" else current
            case.answer(_deliver(case, target, behaviour))
    record = backend.record(key)
    lease_effects = len(case.effects)
    effects = lease_effects if mode is Mode.LEASE else backend.documents(EFFECTS)
    return Result(
        tuple(case.answers),
        record.state if record is not None else None,
        record.attempts if record is not None else 0,
        effects,
    )


_PAYLOAD = {"order": "o-1", "amount": 3}
_OTHER_PAYLOAD = {"order": "o-1", "amount": 4}


def _deliver(case: _Case, target: Entrance, behaviour: str) -> str:
    payload = _OTHER_PAYLOAD if behaviour == "other-payload" else _PAYLOAD
    event_time = datetime.now(UTC) - timedelta(days=1)
    return target.deliver(case.event_id, payload, event_time)


def _instance(case: _Case, behaviour: str) -> Entrance:
    """A new instance of the case's kind whose handler behaves as `behaviour`."""
    deduplicator = case.backend.deduplicator(case.config, case.kind)
    if case.kind in ASYNC_KINDS:

        async def act_async(delivery: Any) -> None:
            _before_effect(behaviour)
            if case.mode is Mode.LEASE:
                case.effects.append(delivery.key)
            else:
                _write_effect(delivery)
            if behaviour == "stale":
                case.backend.expire()
                other = _instance(case, "ok")
                payload, at = _PAYLOAD, datetime.now(UTC) - timedelta(days=1)
                case.answer(await other.deliver_async(case.event_id, payload, at))

        return entrance(case.kind, case.mode, deduplicator, act_async)

    def act(delivery: Any) -> None:
        _before_effect(behaviour)
        if case.mode is Mode.LEASE:
            case.effects.append(delivery.key)
        else:
            _write_effect(delivery)
        if behaviour == "stale":
            case.backend.expire()
            case.answer(_deliver(case, _instance(case, "ok"), "ok"))

    return entrance(case.kind, case.mode, deduplicator, act)


def _before_effect(behaviour: str) -> None:
    if behaviour == "raise":
        raise RuntimeError("the handler failed; retry me")
    if behaviour == "terminal":
        raise TerminalError("the handler refused the event for good")
    if behaviour == "crash":
        raise Crash()


def _write_effect(delivery: Any) -> None:
    """The atomic modes' effect: a document, committed with the marker or not at all."""
    writer = delivery.transaction if delivery.transaction is not None else delivery.batch
    ref = delivery.client.collection(EFFECTS).document(uuid.uuid4().hex)
    writer.set(ref, {"key": delivery.key})


def _storm(case: _Case, copies: int) -> None:
    """`copies` deliveries at once, each on its own instance; each must stop or retry."""
    entrances = [_instance(case, "ok") for _ in range(copies)]
    payload, at = _PAYLOAD, datetime.now(UTC) - timedelta(days=1)
    if case.kind in ASYNC_KINDS:

        async def together() -> list[str]:
            calls = [e.deliver_async(case.event_id, payload, at) for e in entrances]
            return list(await asyncio.gather(*calls))

        answers = asyncio.run(together())
    else:
        with ThreadPoolExecutor(copies) as pool:
            answers = list(pool.map(lambda e: e.deliver(case.event_id, payload, at), entrances))
    assert set(answers) <= {"stop", "retry"}, answers


_SEED_STARTS: dict[str, Callable[[], Any]] = {
    "live": lambda: SERVER_TIMESTAMP,
    "expired": lambda: datetime(2020, 1, 1, tzinfo=UTC),
    "crashed": lambda: datetime(2020, 1, 1, tzinfo=UTC),
}


def _seeded(case: _Case, kind: str) -> dict[str, Any]:
    """Another delivery's record: its lease live, expired, or expired on the last attempt."""
    fields = new_record(
        event_id=case.event_id,
        suffix=SUFFIX,
        mode=case.mode,
        state=State.IN_PROGRESS,
        owner=uuid.uuid4().hex,
        leased=True,
        lease_seconds=600 if kind == "live" else 60,
        payload_hash=None,
        expire_at=datetime.now(UTC) + timedelta(days=1),
        attempts=MAX_ATTEMPTS if kind == "crashed" else 1,
    )
    fields[Field.LEASE_STARTED_AT] = _SEED_STARTS[kind]()
    return fields
