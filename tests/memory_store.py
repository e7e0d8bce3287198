"""An in-memory dedup store behind the flows' protocol (`dedup.kernel.flow_io`), for fast tests.

`MemoryStore` is a `FlowIO` whose coroutines never suspend (its pauses block the thread, its
per-key turns are a `KeyTurns`), as `dedup.kernel.store.RecordStore` is over a sync client, so
the sync front door drives it on the caller's thread; `AsyncMemoryStore` is its async twin
(pauses and turns of an event loop) over the same documents. They keep what the flows rely on
from Firestore:

* **update times**: every commit gets a strictly increasing time of the store's `MemoryClock`
  (the database clock: `SERVER_TIMESTAMP` becomes the commit time, reads carry a read time);
  a test moves it with `MemoryClock.advance` to expire leases without waiting;
* **preconditions**: create if absent (`AlreadyExists`), update if last written at an update
  time (`FailedPrecondition`, `NotFound`), checked and applied atomically per commit;
* **transactions and batches**: writes buffered in a `MemoryWriter`, committed all or nothing;
  a transaction aborted by a fault is filled again, up to its attempts;
* **lost responses and injected faults**: every write RPC passes through the same `Plan` as
  `tests.dedup.grpc_faults` (`plan(method, n)`, methods `Commit`, `BeginTransaction`,
  `Rollback`), so a fault schedule means the same on the emulator and here:
  `LOSE_RESPONSE` applies the commit and then raises UNAVAILABLE.

It is test-only (it lives under tests/, not in the library) and trusted only as far as the
conformance matrix (`tests/matrix/`) gives the same results on it and on the emulator. Handlers
in tests write their effects through `delivery.client` (a `MemoryClient`) or the delivery's
transaction or batch, as they would with Firestore.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.cloud import firestore
from google.cloud.firestore_v1.field_path import parse_field_path

from dedup.kernel.budget import Budget
from dedup.kernel.flow_io import Fill
from dedup.kernel.record import Conflict, Fields, Snapshot
from dedup.kernel.store import ConditionalTries, StoreBase, snapshot_of
from dedup.kernel.turns import KeyTurns, TurnTimeout
from tests.dedup.grpc_faults import Fault, Plan

DATABASE = "(default)"
PROJECT = "demo-exactly-once"


def no_faults(method: str, n: int) -> Fault:
    """The plan of a healthy store."""
    return Fault.PASS


class MemoryClock:
    """The store's database clock: real time plus an offset a test can move forward."""

    def __init__(self) -> None:
        self._offset = timedelta()
        self._last = datetime.min.replace(tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The current database time."""
        return datetime.now(UTC) + self._offset

    def commit_time(self) -> datetime:
        """A new commit time, strictly after every earlier one."""
        with self._lock:
            self._last = max(self.now(), self._last + timedelta(microseconds=1))
            return self._last

    def advance(self, seconds: float) -> None:
        """Move the database clock `seconds` forward (expire leases without waiting)."""
        with self._lock:
            self._offset += timedelta(seconds=seconds)


@dataclass(frozen=True)
class MemoryDocument:
    """A document as read (what `dedup.kernel.record.Record.from_snapshot` and `snapshot_of`
    read)."""

    id: str
    data: dict[str, Any] | None
    read_time: datetime
    update_time: datetime | None

    @property
    def exists(self) -> bool:
        """The document exists."""
        return self.data is not None

    def to_dict(self) -> dict[str, Any] | None:
        """A copy of its fields (None if absent)."""
        return dict(self.data) if self.data is not None else None

    def get(self, name: str) -> Any:
        """One field."""
        return (self.data or {}).get(name)


@dataclass(frozen=True)
class MemoryRef:
    """A document reference of a `MemoryClient` (sync writes are one `Commit` RPC each)."""

    client: MemoryClient
    path: str

    @property
    def id(self) -> str:
        """The document id."""
        return self.path.rsplit("/", 1)[-1]

    @property
    def _document_path(self) -> str:  # what dedup.platform.firestore_internals.document_name reads
        return f"projects/{PROJECT}/databases/{DATABASE}/documents/{self.path}"

    def get(self, transaction: Any = None, **_: Any) -> MemoryDocument:
        """Read the document."""
        return self.client.store.document(self.path)

    def set(self, data: Fields, **_: Any) -> None:
        """Write the whole document (one commit)."""
        self.client.store.commit([_Write("set", self.path, data)])

    def create(self, data: Fields, **_: Any) -> None:
        """Create the document if absent (one commit)."""
        self.client.store.commit([_Write("create", self.path, data)])

    def delete(self, **_: Any) -> None:
        """Delete the document (one commit)."""
        self.client.store.commit([_Write("delete", self.path, None)])


@dataclass(frozen=True)
class AsyncMemoryRef(MemoryRef):
    """A document reference of an `AsyncMemoryClient`: its calls are awaited."""

    async def get(self, transaction: Any = None, **_: Any) -> MemoryDocument:  # type: ignore[override]
        """Read the document."""
        return MemoryRef.get(self)

    async def set(self, data: Fields, **_: Any) -> None:  # type: ignore[override]
        """Write the whole document (one commit)."""
        MemoryRef.set(self, data)

    async def create(self, data: Fields, **_: Any) -> None:  # type: ignore[override]
        """Create the document if absent (one commit)."""
        MemoryRef.create(self, data)


@dataclass(frozen=True)
class MemoryCollection:
    """A collection of a `MemoryClient`."""

    client: MemoryClient
    path: str

    def document(self, document_id: str) -> MemoryRef:
        """The reference of one document."""
        kind = AsyncMemoryRef if self.client.awaited else MemoryRef
        return kind(self.client, f"{self.path}/{document_id}")

    def list_documents(self) -> list[MemoryRef]:
        """Every document directly in this collection."""
        prefix = self.path + "/"
        names = [p for p in self.client.store.paths() if p.startswith(prefix)]
        return [self.document(p[len(prefix) :]) for p in names if "/" not in p[len(prefix) :]]


@dataclass(frozen=True)
class MemoryClient:
    """What a handler gets as `delivery.client`: collections and documents of the store."""

    store: MemoryStore
    awaited: bool = False
    project: str = PROJECT
    _database: str = DATABASE

    def collection(self, path: str) -> MemoryCollection:
        """A collection."""
        return MemoryCollection(self, path)


@dataclass(frozen=True)
class _Write:
    operation: str  # create, set, update, delete
    path: str
    data: Fields | None
    fence: datetime | None = None


@dataclass
class MemoryWriter:
    """A transaction or batch: buffers writes until its store commits them together."""

    client: MemoryClient
    writes: list[_Write] = field(default_factory=list)
    commit_time: datetime | None = None
    """When a committed transaction committed (as `BoundedTransaction` keeps it)."""

    def create(self, ref: MemoryRef, data: Fields) -> None:
        """Create `ref` if absent, at commit."""
        self.writes.append(_Write("create", ref.path, dict(data)))

    def set(self, ref: MemoryRef, data: Fields, merge: bool = False) -> None:
        """Write `ref` whole, at commit."""
        self.writes.append(_Write("set", ref.path, dict(data)))

    def update(self, ref: MemoryRef, data: Fields, option: Any = None) -> None:
        """Update fields of an existing `ref` (if last written at the option's time)."""
        fence = getattr(option, "_last_update_time", None) if option is not None else None
        self.writes.append(_Write("update", ref.path, dict(data), fence))

    def delete(self, ref: MemoryRef) -> None:
        """Delete `ref`, at commit."""
        self.writes.append(_Write("delete", ref.path, None))

    def get(self, ref: MemoryRef, **_: Any) -> MemoryDocument:
        """Read `ref` (a transaction's read)."""
        return self.client.store.document(ref.path)


class MemoryStore(StoreBase[MemoryClient]):
    """The dedup collection in memory, a `dedup.kernel.flow_io.FlowIO` that never suspends;
    thread-safe.

    `plan` injects faults into write RPCs as `tests.dedup.grpc_faults` does on the emulator;
    `calls` counts the RPCs per method.
    """

    def __init__(
        self,
        collection: str = "triggerEvents",
        *,
        plan: Plan = no_faults,
        clock: MemoryClock | None = None,
        rpc_timeout_seconds: float = 10,
    ) -> None:
        """An empty store of `collection`, its faults from `plan`, its deliveries taking turns
        per key in a table of its own (`instance`: another instance's)."""
        super().__init__(MemoryClient(self), collection, rpc_timeout_seconds=rpc_timeout_seconds)
        self.plan = plan
        self.clock = clock if clock is not None else MemoryClock()
        self.calls: Counter[str] = Counter()
        self.turns = KeyTurns()
        self._documents: dict[str, tuple[dict[str, Any], datetime]] = {}
        self._lock = threading.RLock()

    def instance(self) -> MemoryStore:
        """These documents (and plan, clock and counts) as another instance reaches them: its
        own per-key turns, as each instance's `RecordStore` has (give one to each
        `Deduplicator` that shares the store)."""
        other = copy.copy(self)
        other.turns = KeyTurns()
        return other

    # --- the documents -------------------------------------------------------------------

    def paths(self) -> list[str]:
        """Every document path in the store."""
        with self._lock:
            return list(self._documents)

    def document(self, path: str) -> MemoryDocument:
        """Read any document."""
        with self._lock:
            found = self._documents.get(path)
            read_time = self.clock.now()
            if found is None:
                return MemoryDocument(path.rsplit("/", 1)[-1], None, read_time, None)
            data, update_time = found
            return MemoryDocument(path.rsplit("/", 1)[-1], dict(data), read_time, update_time)

    def put(self, path: str, data: Fields) -> datetime:
        """Write a document as a test's set-up, outside the fault plan."""
        return self._apply([_Write("set", path, data)])

    def rpc(self, method: str, call: Callable[[], Any]) -> Any:
        """Apply the plan's fault for this `method` call around `call`."""
        with self._lock:
            self.calls[method] += 1
            fault = self.plan(method, self.calls[method])
        if fault is Fault.PASS:
            return call()
        if fault is Fault.LOSE_RESPONSE:
            call()
            raise api_exceptions.ServiceUnavailable("injected: response lost")
        if fault is Fault.INVALID:
            raise api_exceptions.InvalidArgument("injected: Transaction is invalid or expired.")
        if fault is Fault.ABORT:
            raise api_exceptions.Aborted("injected: Transaction lock timeout")
        if fault is Fault.DENY:
            raise api_exceptions.PermissionDenied("injected: denied")
        raise api_exceptions.DeadlineExceeded("injected: deadline exceeded")

    def commit(self, writes: list[_Write]) -> datetime:
        """Commit `writes` all or nothing (one `Commit` RPC): their commit time."""
        return self.rpc("Commit", lambda: self._apply(writes))

    def _apply(self, writes: list[_Write]) -> datetime:
        with self._lock:
            for write in writes:
                found = self._documents.get(write.path)
                if write.operation == "create" and found is not None:
                    raise api_exceptions.AlreadyExists(f"document {write.path} exists")
                if write.operation == "update" and found is None:
                    raise api_exceptions.NotFound(f"no document {write.path}")
                if write.fence is not None and (found is None or found[1] != write.fence):
                    raise api_exceptions.FailedPrecondition(f"{write.path} changed")
            at = self.clock.commit_time()
            for write in writes:
                if write.operation == "delete":
                    self._documents.pop(write.path, None)
                    continue
                given = write.data or {}
                data = {k: at if v is firestore.SERVER_TIMESTAMP else v for k, v in given.items()}
                if write.operation == "update":
                    data = _updated(self._documents[write.path][0], data)
                self._documents[write.path] = (data, at)
            return at

    # --- the record operations (dedup.kernel.flow_io.FlowIO) ---------------------------------

    def ref(self, key: str) -> MemoryRef:
        """The record's reference."""
        return self.client.collection(self.collection).document(key)

    async def read(
        self, key: str, *, action: str = "claim", budget: Budget | None = None
    ) -> Snapshot:
        """Read the record (reads never fail here, as document reads pass the gRPC plan)."""
        return snapshot_of(self.document(self.path(key)))

    async def create(
        self, key: str, fields: Fields, *, action: str = "claim", budget: Budget | None = None
    ) -> datetime | Conflict:
        """Create the record if absent (see `RecordStore.create`)."""
        write = _Write("create", self.path(key), fields)
        return await self._conditional(action, key, write, budget)

    async def update_if_unchanged(
        self,
        key: str,
        fields: Fields,
        update_time: datetime,
        *,
        action: str,
        budget: Budget | None = None,
        keep_trying: bool = False,
    ) -> datetime | Conflict:
        """Update the record if last written at `update_time` (see `RecordStore`)."""
        write = _Write("update", self.path(key), fields, update_time)
        return await self._conditional(action, key, write, budget, keep_trying)

    async def commit_batch(
        self,
        key: str,
        fill: Fill,
        fence: datetime | None,
        *,
        budget: Budget | None = None,
        client: MemoryClient | None = None,
    ) -> Any:
        """Fill a batch (of `client`, default this store's), add the marker, commit it once."""
        writer = MemoryWriter(client or self.client)
        result, fields = await fill(writer)
        self.commit([*writer.writes, self._marker(key, fields, fence)])
        return result

    async def run_transaction(
        self,
        key: str,
        fill: Fill,
        fence: datetime | None,
        *,
        attempts: int,
        budget: Budget | None = None,
        client: MemoryClient | None = None,
    ) -> Any:
        """Fill a transaction (of `client`, default this store's), add the marker, commit it;
        filled again on Aborted."""
        for attempt in range(attempts):
            writer = self.begin()
            writer.client = client or self.client
            try:
                result, fields = await fill(writer)
                writer.commit_time = self.commit([*writer.writes, self._marker(key, fields, fence)])
            except api_exceptions.Aborted:
                self.rollback()
                if attempt + 1 == attempts:
                    raise
                continue
            except BaseException:
                self.rollback()
                raise
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    async def sleep(self, seconds: float) -> None:
        """Block this thread (never suspends: the sync front door's `drive` runs it)."""
        time.sleep(seconds)

    @asynccontextmanager
    async def turn(self, key: str, timeout: float | None = None) -> AsyncIterator[None]:
        """This thread's turn for `key` (`KeyTurns.turn`), waited for `timeout` at most."""
        with self.turns.turn(key, timeout):
            yield

    def begin(self) -> MemoryWriter:
        """A new transaction (one `BeginTransaction` RPC)."""
        return self.rpc("BeginTransaction", lambda: MemoryWriter(self.client))

    def rollback(self) -> None:
        """Give a transaction up (one `Rollback` RPC; its failure is ignored, as the library's)."""
        with suppress(api_exceptions.GoogleAPICallError):
            self.rpc("Rollback", lambda: None)

    def _marker(self, key: str, fields: Fields, fence: datetime | None) -> _Write:
        if fence is None:
            return _Write("create", self.path(key), fields)
        return _Write("update", self.path(key), fields, fence)

    async def _conditional(
        self, action: str, key: str, write: _Write, budget: Budget | None, keep_trying: bool = False
    ) -> datetime | Conflict:
        tries = ConditionalTries(self, action, key, budget, keep_trying=keep_trying)
        while True:
            try:
                return self.commit([write])
            except Exception as exc:
                pause = tries.after(exc)
            if isinstance(pause, Conflict):
                return pause
            await self.sleep(pause)


class AsyncMemoryStore:
    """`MemoryStore`'s documents with the pacing of an event loop: the async twin, as
    `dedup.kernel.store.RecordStore` over an `AsyncClient` is of the one over a sync client.
    (A transient fault's backoff still blocks: the in-memory store's pause, not the loop's.)"""

    def __init__(self, store: MemoryStore, turns: KeyTurns | None = None) -> None:
        """Serve `store`'s documents; deliveries of one key take turns in `turns`."""
        self.store = store
        self.client = MemoryClient(store, awaited=True)
        self.turns = turns if turns is not None else KeyTurns()
        self.path = store.path
        self.unavailable = store.unavailable
        self.read = store.read
        self.create = store.create
        self.update_if_unchanged = store.update_if_unchanged

    async def commit_batch(
        self, key: str, fill: Fill, fence: datetime | None, **bounds: Any
    ) -> Any:
        """See `MemoryStore.commit_batch` (the batch of the awaited client)."""
        return await self.store.commit_batch(key, fill, fence, **bounds, client=self.client)

    async def run_transaction(
        self, key: str, fill: Fill, fence: datetime | None, **bounds: Any
    ) -> Any:
        """See `MemoryStore.run_transaction` (the transaction of the awaited client)."""
        return await self.store.run_transaction(key, fill, fence, **bounds, client=self.client)

    async def sleep(self, seconds: float) -> None:
        """Pause this task, not the loop."""
        await asyncio.sleep(seconds)

    @asynccontextmanager
    async def turn(self, key: str, timeout: float | None = None) -> AsyncIterator[None]:
        """This task's turn for `key` (`timeout` as `RecordStore.turn`)."""
        with self.turns.lock_of(key, asyncio.Lock) as lock:
            try:
                await asyncio.wait_for(lock.acquire(), timeout)
            except TimeoutError:
                raise TurnTimeout(f"no turn on {key} within {timeout} s") from None
            try:
                yield
            finally:
                lock.release()


def _updated(data: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """`data` after an update of `fields`, whose keys are field paths as Firestore's `update`
    reads them (`a.b` sets `b` inside the map `a`, creating it; backquotes quote a part): the
    rest of each map is kept."""
    result = dict(data)
    for path, value in fields.items():
        *parents, last = parse_field_path(path)
        inside = result
        for part in parents:
            child = inside.get(part)
            inside[part] = dict(child) if isinstance(child, dict) else {}
            inside = inside[part]
        inside[last] = value
    return result
