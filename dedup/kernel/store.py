"""Firestore operations on dedup records through either client (`RecordStore`, the flows'
`FlowIO`, whose protocol says what each guarantees), no decisions; the one place a write is
retried (`ConditionalTries`) and the one way to learn whether an unanswered write landed
(`read_back`): docs/architecture.md, "A write whose answer was lost"."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as api_exceptions
from google.api_core.retry import AsyncRetry, Retry, if_exception_type
from google.cloud import firestore
from google.cloud.firestore import AsyncClient

from dedup.errors import DatabaseMismatch, RecordRefused, StoreUnavailable
from dedup.kernel.budget import FLOOR, Budget
from dedup.kernel.delivery import driven
from dedup.kernel.record import Conflict, Fields, Record, Snapshot
from dedup.kernel.store_errors import PRECONDITION_ERRORS, TRANSIENT_ERRORS, unanswered
from dedup.kernel.turns import KeyTurns, TurnTimeout
from dedup.platform.firestore_internals import (
    BoundedAsyncTransaction,
    BoundedTransaction,
    buffered_write_names,
    database_of,
    document_name,
)

if TYPE_CHECKING:
    from dedup.kernel.flow_io import Fill, FlowIO

ROLLBACK_FLOOR_SECONDS = 0.5
"""The least a rollback is given, even past the budget: one cut short holds its locks 60 s."""

BACKOFF_BASE_SECONDS = 0.02
BACKOFF_CAP_SECONDS = 1.0


def backoff(round_: int) -> float:
    """Full-jitter exponential backoff for retry `round_` (0-based), in seconds."""
    return random.uniform(0, min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2**round_))


class StoreBase[C]:
    """The dedup collection of one client `C`, shared with the tests' in-memory stores."""

    def __init__(self, client: C, collection: str, *, rpc_timeout_seconds: float = 10) -> None:
        """`collection` through `client`; a call given no budget ends in `rpc_timeout_seconds`."""
        self.client = client
        self.collection = collection
        self.rpc_timeout_seconds = rpc_timeout_seconds
        self.database = database_of(client)

    def path(self, key: str) -> str:
        """The record's document path, `<collection>/<key>`, as used in logs and errors."""
        return f"{self.collection}/{key}"

    def budget(self, given: Budget | None) -> Budget:
        """The `Budget` of one call started now: `given.for_call()`, else (outside any
        delivery) no end of its own, each RPC given the RPC timeout."""
        if given is None:
            return Budget.of_call(self.rpc_timeout_seconds, None)
        return given.for_call()

    def unavailable(self, action: str, key: str, exc: BaseException | None) -> StoreUnavailable:
        """The error for a failed `action` on the record (chain `exc` with `from`)."""
        return StoreUnavailable(
            f"could not {action} {self.path(key)}: {exc}; the event will be retried "
            "(check that Firestore is reachable and the service account may write it)"
        )

    @contextmanager
    def wrapped(self, action: str, key: str) -> Iterator[None]:
        """Turn a Google API error raised inside into `StoreUnavailable` (chaining it)."""
        try:
            yield
        except (api_exceptions.GoogleAPICallError, api_exceptions.RetryError) as exc:
            raise self.unavailable(action, key, exc) from exc


class RecordStore(StoreBase[Any]):
    """The flows' `FlowIO` over one Firestore client: over a `firestore.Client` its coroutines
    block and never suspend (any thread); over an `AsyncClient` they await it (its loop)."""

    def __init__(
        self,
        client: firestore.Client | AsyncClient,
        collection: str,
        *,
        turns: KeyTurns | None = None,
        rpc_timeout_seconds: float = 10,
    ) -> None:
        """As `StoreBase`, deliveries of one key taking turns in `turns` (default: its own)."""
        super().__init__(client, collection, rpc_timeout_seconds=rpc_timeout_seconds)
        self.turns = turns if turns is not None else KeyTurns()
        self.awaits = isinstance(client, AsyncClient)  # its calls return awaitables
        self._records = client.collection(collection)
        self._last_ref: tuple[str, Any] = ("", None)

    def ref(self, key: str) -> Any:
        """The record's document (of the client's kind; the last one kept: a delivery's)."""
        key_ref = self._last_ref
        if key_ref[0] != key:
            key_ref = self._last_ref = (key, self._records.document(key))
        return key_ref[1]

    def transaction(self, *, max_attempts: int, budget: Budget | None = None) -> Any:
        """A new `BoundedTransaction` (`BoundedAsyncTransaction` over an `AsyncClient`), each
        RPC bounded by `budget.rpc()` asked right before it."""
        kind: Any = BoundedAsyncTransaction if self.awaits else BoundedTransaction
        call = self.budget(budget)
        return kind(
            self.client,
            max_attempts=max_attempts,
            timeout=call.rpc,
            begin_retry=self.retry(call.rpc()),
            rollback_timeout=partial(call.rpc, ROLLBACK_FLOOR_SECONDS),
        )

    def retry(self, timeout: float) -> Any:
        """`transient_retry` of the client's kind (`AsyncRetry` or `Retry`), within `timeout`."""
        kind: Any = AsyncRetry if self.awaits else Retry
        return transient_retry(timeout, kind)

    async def read(
        self, key: str, *, action: str = "claim", budget: Budget | None = None
    ) -> Snapshot:
        """`RecordIO.read`, transient errors retried."""
        timeout = self.budget(budget).rpc()
        with self.wrapped(action, key):
            document = self.ref(key).get(retry=self.retry(timeout), timeout=timeout)
            if self.awaits:
                document = await document
        return snapshot_of(document)

    async def create(
        self, key: str, fields: Fields, *, action: str = "claim", budget: Budget | None = None
    ) -> datetime | Conflict:
        """`RecordIO.create`, transient errors retried (`ConditionalTries`)."""
        return await self._conditional(action, key, budget, False, self.ref(key).create, fields)

    async def update_if_unchanged(
        self,
        key: str,
        fields: Fields,
        fence: datetime,
        *,
        action: str,
        budget: Budget | None = None,
        keep_trying: bool = False,
    ) -> datetime | Conflict:
        """`RecordIO.update_if_unchanged`, retried by `ConditionalTries`."""
        option = self.client.write_option(last_update_time=fence)
        update = self.ref(key).update
        return await self._conditional(action, key, budget, keep_trying, update, fields, option)

    async def commit_batch(
        self, key: str, fill: Fill, fence: datetime | None, *, budget: Budget | None = None
    ) -> Any:
        """`RecordIO.commit_batch`, the marker added by `add_marker`."""
        call = self.budget(budget)
        batch = self.client.batch()
        result, fields = await fill(batch)
        add_marker(batch, self.ref(key), fields, fence, "write_only")
        committed = batch.commit(retry=None, timeout=call.rpc())
        if self.awaits:
            await committed
        return result

    async def run_transaction(
        self,
        key: str,
        fill: Fill,
        fence: datetime | None,
        *,
        attempts: int,
        budget: Budget | None = None,
    ) -> Any:
        """`RecordIO.run_transaction` in a bounded `transaction`."""
        ref = self.ref(key)

        async def body(transaction: Any) -> Any:
            result, fields = await fill(transaction)
            add_marker(transaction, ref, fields, fence, "transaction")
            return result

        transaction = self.transaction(max_attempts=attempts, budget=budget)
        if self.awaits:
            return await firestore.async_transactional(body)(transaction)
        return firestore.transactional(driven(body))(transaction)

    async def sleep(self, seconds: float) -> None:
        """`Pacing.sleep`: block this thread, or (async) let the event loop run."""
        if self.awaits:
            await asyncio.sleep(seconds)
        else:
            time.sleep(seconds)

    def turn(self, key: str, timeout: float | None = None) -> AbstractAsyncContextManager[None]:
        """`Pacing.turn`, over this store's `KeyTurns`."""
        if self.awaits:
            return self._async_turn(key, timeout)
        return self.turns.turn(key, timeout)

    @asynccontextmanager
    async def _async_turn(self, key: str, timeout: float | None) -> AsyncIterator[None]:
        with self.turns.lock_of(key, asyncio.Lock) as lock:
            try:
                await asyncio.wait_for(lock.acquire(), timeout)
            except TimeoutError:
                raise TurnTimeout(f"no turn on {key} within {timeout:.1f} s") from None
            try:
                yield
            finally:
                lock.release()

    async def _conditional(
        self,
        action: str,
        key: str,
        budget: Budget | None,
        keep_trying: bool,
        write: Callable[..., Any],
        *args: Any,
    ) -> datetime | Conflict:
        """`write(*args, retry=None, timeout=...)` (a reference's `create` or `update`), its
        tries ruled by `ConditionalTries`."""
        tries = ConditionalTries(self, action, key, budget, keep_trying=keep_trying)
        while True:
            try:
                written = write(*args, retry=None, timeout=tries.timeout())
                if self.awaits:
                    written = await written
                fence: datetime = written.update_time  # Firestore always returns it
                return fence
            except Exception as exc:
                pause = tries.after(exc)
            if isinstance(pause, Conflict):
                return pause
            await self.sleep(pause)


def add_marker(writer: Any, ref: Any, fields: Fields, fence: datetime | None, mode: str) -> None:
    """Add the marker write to a transaction or batch: a create if `fence` is None, else an
    update fenced by it. `DatabaseMismatch` if `writer` holds writes outside the records'
    database."""
    require_one_database(writer, ref, mode)
    if fence is None:
        writer.create(ref, fields)
        return
    writer.update(ref, fields, option=firestore.Client.write_option(last_update_time=fence))


def database_of_name(name: str) -> str:
    """The database id in a document resource name `projects/p/databases/d/documents/...`."""
    return name.split("/databases/", 1)[1].split("/", 1)[0] if "/databases/" in name else ""


def require_one_database(writer: Any, marker: Any, mode: str) -> None:
    """Raise `DatabaseMismatch` if `writer` (a transaction or batch of either client) holds a
    write outside the database of `marker` (the record's document reference)."""
    records = database_of_name(document_name(marker))
    for name in buffered_write_names(writer):
        database = database_of_name(name)
        if database != records:
            document = name.split("/documents/", 1)[-1]
            raise DatabaseMismatch(
                f"{mode} mode: the handler wrote {document} in Firestore database {database!r}, "
                f"but the dedup records (and the marker that must commit with its writes) live "
                f"in database {records!r}: one transaction cannot write to two databases. Keep "
                f"the records in the handler's database (unset DEDUP_DATABASE so they follow the "
                f"triggering event's database, or set DEDUP_DATABASE={database}), or use lease "
                "mode; nothing was committed"
            )


class ConditionalTries:
    """The retry rule of one conditional write, the one place a record write is retried:
    transient errors (with `keep_trying`, any Firestore error) are retried with backoff within
    its `Budget`; a failed precondition is a `Conflict`, a refused write `RecordRefused`,
    anything else from Firestore `StoreUnavailable`."""

    def __init__(
        self,
        store: StoreBase[Any],
        action: str,
        key: str,
        budget: Budget | None,
        *,
        keep_trying: bool = False,
    ):
        """Tries of `action` on `key` through `store` within `budget` (None: the store's RPC
        timeout from now)."""
        self._keep_trying = keep_trying
        self._store = store
        self._action = action
        self._key = key
        if budget is None:
            budget = Budget.of_call(store.rpc_timeout_seconds, store.rpc_timeout_seconds)
        self._budget = budget  # and its end as `Budget.for_call` gives it, without a Budget:
        self._ends = max(budget.ends, budget.clock() + FLOOR)
        self._unanswered = False
        self._round = 0

    def timeout(self) -> float:
        """The timeout of the next try: the RPC timeout, or what is left of the budget."""
        budget = self._budget
        return max(FLOOR, min(budget.rpc_timeout, self._ends - budget.clock()))

    def after(self, exc: Exception) -> float | Conflict:
        """After a try raised `exc`: the `Conflict` to return, or the pause before the next
        try; raises `RecordRefused`, `StoreUnavailable` (chaining `exc`), or `exc` itself."""
        if isinstance(exc, PRECONDITION_ERRORS):
            return Conflict(unanswered=self._unanswered)
        if isinstance(exc, api_exceptions.InvalidArgument | TypeError | ValueError | OverflowError):
            raise RecordRefused(  # not an expired transaction: a conditional write is none
                f"could not {self._action} {self._store.path(self._key)}: Firestore refused the "
                f"write ({type(exc).__name__}: {exc}); a retry would be refused the same way"
            ) from exc
        transient = isinstance(exc, TRANSIENT_ERRORS)
        if transient or (self._keep_trying and isinstance(exc, _STORE_ERRORS)):
            self._unanswered = self._unanswered or transient
            pause = backoff(self._round)
            self._round += 1
            if self._budget.clock() + pause >= self._ends:
                raise self._store.unavailable(self._action, self._key, exc) from exc
            return pause
        if isinstance(exc, _STORE_ERRORS):
            raise self._store.unavailable(self._action, self._key, exc) from exc
        raise exc


_STORE_ERRORS = (api_exceptions.GoogleAPICallError, api_exceptions.RetryError)


async def read_back(
    io: FlowIO,
    key: str,
    budget: Budget,
    *,
    action: str = "claim",
    until_end: bool = False,
    then: str = "",
) -> Snapshot:
    """The record as it is now, read within `budget`. `until_end`: a read failing transiently
    is tried until `budget` ends; else, or past it, `StoreUnavailable` (ending with `then`)."""
    for round_ in itertools.count():
        try:
            return await io.read(key, action=action, budget=budget.for_call(one_rpc=True))
        except StoreUnavailable as exc:
            if not (until_end and unanswered(exc)):
                raise
            pause = backoff(round_)
            if not budget.affords(pause):
                raise StoreUnavailable(
                    f"{exc}; its {action} may have landed unanswered, the store down until the "
                    f"budget ended{then}"
                ) from exc
            await io.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover


def snapshot_of(document: Any) -> Snapshot:
    """A `Snapshot` of a document read through either client."""
    return Snapshot(
        record=Record.from_snapshot(document),
        read_time=_required_time(document.read_time),
        update_time=document.update_time,
    )


def transient_retry[R: (Retry, AsyncRetry)](timeout: float, kind: type[R]) -> R:
    """The client library's retry (`Retry` or `AsyncRetry`) of transient errors within
    `timeout` seconds, for reads and begins."""
    return kind(
        predicate=if_exception_type(*TRANSIENT_ERRORS),
        initial=0.05,
        maximum=1.0,
        multiplier=2.0,
        timeout=timeout,
    )


def _required_time(value: datetime | None) -> datetime:
    if value is None:  # pragma: no cover - Firestore always returns it for a write or read
        raise StoreUnavailable("Firestore returned no timestamp for a dedup write")
    return value
