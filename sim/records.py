"""The kernel's record operations (`dedup.kernel.flow_io`) over the simulated server, done as
`dedup.kernel.store.RecordStore` does them over a Firestore client, and the client objects a
handler gets (documents, a batch, a transaction).

What is the client library's and what is the kernel's, kept apart as in production:

* the kernel's: `ConditionalTries` (a conditional write's retries of transient errors, and
  `Conflict.unanswered`), the time bounds (each call's `StoreBase.budget`) and
  the error wrapping (`StoreBase.unavailable`) are imported from `dedup.kernel.store` and run
  as they are;
* the client library's, modelled here: a read retries transient errors with backoff within
  its timeout (google-api-core `Retry`, `RetryError` at the end); a transaction is run by
  `transactional` (begin, the body, commit; `Aborted` at commit tries the body again, up to
  its attempts, then `ValueError`; anything else rolls back and is raised); the sync side's
  `BoundedTransaction` begins at the body's first read, the async side's at its start
  (`dedup.platform.firestore_internals`); values are encoded as `encode_value` does
  (`sim.values.encode`: a `Decimal` is a `TypeError` before any RPC).

`SimRecords` does the record operations as plain calls; `SimFlowIO` is the `FlowIO` of either
front door (`records=...`) over them, whose awaits never suspend (a pause or a turn switches
greenlets).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from datetime import datetime
from functools import partial
from typing import Any

from google.api_core import exceptions as api
from google.cloud import firestore

from dedup.kernel.budget import Budget
from dedup.kernel.delivery import driven
from dedup.kernel.record import Conflict, Fields, Snapshot
from dedup.kernel.store import ConditionalTries, StoreBase, snapshot_of
from dedup.kernel.store_errors import TRANSIENT_ERRORS
from sim.server import Write, at, us_of
from sim.values import as_read, encode

USER_FIELDS = ("steps", "notes", "result")
"""The record's fields that hold the user's values (a step's, a note's, a result)."""


class SimDocument:
    """A document as read (what `Record.from_snapshot` and `snapshot_of` read)."""

    def __init__(self, path: str, data: Any, read_us: int, update_us: int | None) -> None:
        self.id = path.rsplit("/", 1)[-1]
        self.path = path
        self._data = data
        self.read_time = at(read_us)
        self.update_time = at(update_us) if update_us is not None else None

    @property
    def exists(self) -> bool:
        return self._data is not None

    def to_dict(self) -> dict[str, Any] | None:
        return dict(self._data) if self._data is not None else None

    def get(self, name: str) -> Any:
        return (self._data or {}).get(name)


class SimRef:
    """A document reference of a `SimClient`; its calls are RPCs of the running task."""

    def __init__(self, client: SimClient, path: str) -> None:
        self.client = client
        self.path = path
        self.id = path.rsplit("/", 1)[-1]

    def get(self, transaction: Any = None, **_: Any) -> Any:
        if transaction is not None:
            return transaction.get(self)
        return self.client.records.get(self.path, handler=True)

    def set(self, data: Fields, **_: Any) -> None:
        self.client.records.write([Write("set", self.path, encode(data))], "handler: set")

    def create(self, data: Fields, **_: Any) -> None:
        self.client.records.write([Write("create", self.path, encode(data))], "handler: create")


class AsyncSimRef(SimRef):
    """`SimRef` of an async client: its calls are awaited."""

    async def get(self, transaction: Any = None, **_: Any) -> Any:
        if transaction is not None:
            return await transaction.get(self)
        return SimRef.get(self)

    async def set(self, data: Fields, **_: Any) -> None:  # type: ignore[override]
        SimRef.set(self, data)

    async def create(self, data: Fields, **_: Any) -> None:  # type: ignore[override]
        SimRef.create(self, data)


class SimCollection:
    def __init__(self, client: SimClient, path: str) -> None:
        self.client = client
        self.path = path

    def document(self, document_id: str) -> SimRef:
        kind = AsyncSimRef if self.client.awaited else SimRef
        return kind(self.client, f"{self.path}/{document_id}")


class SimClient:
    """What a handler gets as `delivery.client`."""

    _database = "(default)"
    project = "demo-sim"

    def __init__(self, records: SimRecords, awaited: bool) -> None:
        self.records = records
        self.awaited = awaited

    def collection(self, path: str) -> SimCollection:
        return SimCollection(self, path)


class SimBatch:
    """A batch or a transaction's writes, buffered until the commit."""

    def __init__(self) -> None:
        self.writes: list[Write] = []
        self.commit_time: datetime | None = None

    def create(self, ref: SimRef, data: Fields) -> None:
        self.writes.append(Write("create", ref.path, encode(data)))

    def set(self, ref: SimRef, data: Fields, merge: bool = False) -> None:
        self.writes.append(Write("set", ref.path, encode(data)))

    def update(self, ref: SimRef, data: Fields, option: Any = None) -> None:
        guard = getattr(option, "_last_update_time", None)
        self.writes.append(Write("update", ref.path, encode(data), us_of(guard) if guard else None))

    def delete(self, ref: SimRef) -> None:
        self.writes.append(Write("delete", ref.path))


class SimTransaction(SimBatch):
    """A transaction of the sync client: begun at its first read (`BoundedTransaction`)."""

    def __init__(self, records: SimRecords, bound: Callable[[], float], lazy: bool) -> None:
        super().__init__()
        self.records = records
        self.bound = bound
        self.id: int | None = None
        if not lazy:
            self.begin()

    def begin(self) -> None:
        self.id = self.records.retrying("begin a transaction", self.bound(), self._begin_once)

    def _begin_once(self, timeout: float) -> int:
        world = self.records.world
        return int(world.send("BeginTransaction", lambda now: world.server.begin(now), timeout))

    def get(self, ref: SimRef, **_: Any) -> SimDocument:
        if self.id is None:
            self.begin()
        txn = self.id
        return self.records.get(ref.path, txn, handler=True)


class AsyncSimTransaction(SimTransaction):
    """A transaction of the async client: begun when it starts (`BoundedAsyncTransaction`)."""

    async def get(self, ref: SimRef, **_: Any) -> SimDocument:  # type: ignore[override]
        return SimTransaction.get(self, ref)


class SimRecords(StoreBase[SimClient]):
    """The record operations of `dedup.kernel.flow_io.RecordIO`, as plain calls, over the
    simulated server."""

    def __init__(
        self, world: Any, collection: str, *, rpc_timeout_seconds: float, awaited: bool
    ) -> None:
        super().__init__(
            SimClient(self, awaited), collection, rpc_timeout_seconds=rpc_timeout_seconds
        )
        self.world = world
        self.awaited = awaited

    # --- the client library's calls ----------------------------------------------------

    def retrying(self, what: str, timeout: float, call: Callable[[float], Any]) -> Any:
        """`call(timeout)` retried on transient errors with backoff within `timeout` (the
        library's `Retry`); `RetryError` once out of time."""
        deadline = self.world.now + timeout
        delay = 0.05
        while True:
            try:
                return call(max(0.001, deadline - self.world.now))
            except TRANSIENT_ERRORS as exc:
                pause = self.world.backoff_rng.uniform(0, delay)
                if self.world.now + pause >= deadline:
                    raise api.RetryError(
                        f"Timeout of {timeout:.1f}s exceeded ({what})", exc
                    ) from exc
                self.world.sleep(pause)
                delay = min(delay * 2, 1.0)

    def get(
        self,
        path: str,
        txn: int | None = None,
        timeout: float | None = None,
        *,
        handler: bool = False,
        action: str = "",
    ) -> SimDocument:
        server = self.world.server
        who = "handler: " if handler else ""
        why = f" ({action})" if action else ""

        def once(bound: float) -> SimDocument:
            data, read, updated = self.world.send(
                f"{who}get {path}" + (f" in txn {txn}" if txn else "") + why,
                lambda now: server.get(path, now, txn),
                bound,
            )
            return SimDocument(path, data, read, updated)

        return self.retrying(f"get {path}", timeout or self.rpc_timeout_seconds, once)

    def write(
        self, writes: list[Write], what: str, timeout: float | None = None, txn: int | None = None
    ) -> datetime:
        return at(self.world.commit(writes, timeout or self.rpc_timeout_seconds, txn, what))

    # --- the record operations -----------------------------------------------------------

    def read(self, key: str, *, action: str = "claim", budget: Budget | None = None) -> Snapshot:
        with self.wrapped(action, key):
            return snapshot_of(
                self.get(self.path(key), timeout=self.budget(budget).rpc(), action=action)
            )

    def encoded(self, key: str, fields: Fields) -> Fields:
        """`fields` as the client sends them; what it cannot encode is noted as a refused
        record write (`sim.invariants`: record-fits) before the `TypeError` is raised."""
        try:
            encoded = dict(encode(fields))
        except TypeError as exc:
            self.world.unencodable.append(
                (self.path(key), f"TypeError: {exc.args[0]}: {exc.args[1:]}")
            )
            raise
        if self.world.user_values:  # the user's values, as a read gives them back
            for name, value in encoded.items():
                if name.startswith(USER_FIELDS) and type(value) is not str:
                    encoded[name] = as_read(value)
        return encoded

    def create(
        self, key: str, fields: Fields, *, action: str = "claim", budget: Budget | None = None
    ) -> datetime | Conflict:
        return self._conditional(action, key, "create", fields, None, budget)

    def update_if_unchanged(
        self,
        key: str,
        fields: Fields,
        update_time: datetime,
        *,
        action: str,
        budget: Budget | None = None,
        keep_trying: bool = False,
    ) -> datetime | Conflict:
        guard = us_of(update_time)
        return self._conditional(action, key, "update", fields, guard, budget, keep_trying)

    def _conditional(
        self,
        action: str,
        key: str,
        op: str,
        fields: Fields,
        guard: int | None,
        budget: Budget | None,
        keep_trying: bool = False,
    ) -> datetime | Conflict:
        """One conditional write as `RecordStore` makes it: the client encodes `fields` inside
        each try (a `TypeError` goes to `ConditionalTries.after`, as from `ref.update`)."""
        tries = ConditionalTries(self, action, key, budget, keep_trying=keep_trying)
        path = self.path(key)
        while True:
            try:
                write = Write(op, path, self.encoded(key, fields), guard)
                return self.write([write], f"{op} {path} ({action})", tries.timeout())
            except Exception as exc:
                pause = tries.after(exc)
            if isinstance(pause, Conflict):
                return pause
            self.world.sleep(pause)

    def _marker(self, batch: SimBatch, key: str, fields: Fields, guard: datetime | None) -> None:
        ref = self.client.collection(self.collection).document(key)
        if guard is None:
            batch.create(ref, fields)
        else:
            batch.update(ref, fields, option=firestore.Client.write_option(last_update_time=guard))

    def commit_batch(
        self,
        key: str,
        fill: Callable[[Any], tuple[Any, Fields]],
        guard: datetime | None,
        *,
        budget: Budget | None = None,
    ) -> Any:
        call = self.budget(budget)
        batch = SimBatch()
        result, fields = fill(batch)
        self._marker(batch, key, fields, guard)
        self.write(batch.writes, f"commit batch of {key}", call.rpc())
        return result

    def run_transaction(
        self,
        key: str,
        fill: Callable[[Any], tuple[Any, Fields]],
        guard: datetime | None,
        *,
        attempts: int,
        budget: Budget | None = None,
    ) -> Any:
        call = self.budget(budget)
        each, rollback = call.rpc, partial(call.rpc, 0.5)
        last: Exception | None = None
        kind = AsyncSimTransaction if self.awaited else SimTransaction
        transaction: SimTransaction | None = None
        try:
            for _ in range(attempts):
                transaction = kind(self, each, lazy=not self.awaited)
                result, fields = fill(transaction)
                self._marker(transaction, key, fields, guard)
                try:
                    stamp = self.world.commit(
                        transaction.writes, each(), transaction.id, f"commit txn of {key}"
                    )
                except api.Aborted as exc:
                    last = exc
                    continue
                transaction.commit_time = at(stamp)
                return result
            raise ValueError(f"Failed to commit transaction in {attempts} attempts.") from last
        except BaseException:
            if transaction is not None and transaction.id is not None:
                txn, server = transaction.id, self.world.server
                bound_ = rollback() if callable(rollback) else rollback
                with suppress(api.GoogleAPICallError, api.RetryError):  # as `BoundedTransaction`
                    self.retrying(
                        "rollback",
                        bound_,
                        lambda t: self.world.send(
                            f"rollback txn {txn}", lambda now: server.rollback(txn, now), t
                        ),
                    )
            raise


class SimFlowIO:
    """`SimRecords` awaited, with the pacing of an instance: the `FlowIO` of a
    `Deduplicator(records=...)` or an `AsyncDeduplicator(records=...)`."""

    def __init__(self, records: SimRecords) -> None:
        self.records = records
        self.client = records.client
        self.path = records.path
        self.unavailable = records.unavailable
        self.world = records.world

    async def read(self, key: str, **options: Any) -> Snapshot:
        return self.records.read(key, **options)

    async def create(self, key: str, fields: Fields, **options: Any) -> datetime | Conflict:
        return self.records.create(key, fields, **options)

    async def update_if_unchanged(
        self, key: str, fields: Fields, update_time: datetime, **options: Any
    ) -> datetime | Conflict:
        return self.records.update_if_unchanged(key, fields, update_time, **options)

    async def commit_batch(self, key: str, fill: Any, guard: datetime | None, **bounds: Any) -> Any:
        return self.records.commit_batch(key, driven(fill), guard, **bounds)

    async def run_transaction(
        self, key: str, fill: Any, guard: datetime | None, **bounds: Any
    ) -> Any:
        return self.records.run_transaction(key, driven(fill), guard, **bounds)

    async def sleep(self, seconds: float) -> None:
        self.world.sleep(seconds)

    def turn(self, key: str, timeout: float | None = None) -> _Turn:
        """This delivery's turn on `key` among its instance's, on virtual time (`World`)."""
        return _Turn(self.world, key, timeout)


class _Turn:
    """A delivery's turn on `key` among its instance's: asked of the hub on the way in (it
    may wait, time out or die there), left on the way out, whatever happened inside (a
    class, not a generator's context manager: a delivery takes several)."""

    __slots__ = ("key", "task", "timeout", "world")

    def __init__(self, world: Any, key: str, timeout: float | None) -> None:
        self.world, self.key, self.timeout = world, key, timeout
        self.task = None

    async def __aenter__(self) -> None:
        self.task = self.world.current
        self.world.ask(("turn", self.key, self.timeout))

    async def __aexit__(self, *_: object) -> None:
        self.world.release_turn(self.task, self.key)
