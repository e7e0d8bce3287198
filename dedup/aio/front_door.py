"""`AsyncDeduplicator`: the front door for `async def` handlers, on a `firestore.AsyncClient`;
everything but the client and where its stores are kept is the sync path's
(`dedup.kernel.front_door.DeduplicatorBase`, `run_flow`)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from google.cloud.firestore import AsyncClient

from dedup.aio.delivery import ASYNC_DELIVERIES, AsyncHandler
from dedup.config import DedupConfig
from dedup.kernel.delivery import EventOptions, Outcome, Reconcile
from dedup.kernel.front_door import DeduplicatorBase, default_instance, run_flow
from dedup.kernel.record import RERUN, Mode
from dedup.kernel.store import RecordStore
from dedup.platform.firestore_internals import credentials_of

if TYPE_CHECKING:
    from dedup.kernel.flow_io import FlowIO, Invoke
    from dedup.kernel.run import Run
    from dedup.telemetry import DeliveryTrace, Telemetry


class AsyncDeduplicator(DeduplicatorBase):
    """Runs async handlers at most once per (event id, suffix), effectively once with retries:
    every mode and guarantee of `dedup.Deduplicator`, awaited. One instance serves every task
    of a process; its client is made on the first delivery of each event loop (`client` is
    always that one: use it on one loop), its caches shared by all loops."""

    awaits_handlers = True

    def __init__(
        self,
        config: DedupConfig | None = None,
        *,
        client: AsyncClient | None = None,
        client_factory: Callable[[], AsyncClient] | None = None,
        telemetry: Telemetry | None = None,
        records: FlowIO | None = None,
    ) -> None:
        """As `DeduplicatorBase`; `records`: an async store used on every event loop."""
        super().__init__(
            config, telemetry, client=client, client_factory=client_factory, records=records
        )
        self._stores: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str | None, RecordStore]
        ] = weakref.WeakKeyDictionary()

    def new_client(self, database: str, *, like: Any = None) -> AsyncClient:
        """An `AsyncClient` on `database` (see `DeduplicatorBase.new_client`)."""
        if like is None:
            return AsyncClient(project=self.config.project, database=database)
        return AsyncClient(
            project=like.project, credentials=credentials_of(like), database=database
        )

    def store_table(self) -> dict[str | None, RecordStore]:
        """The running event loop's table (each loop has clients of its own)."""
        return self._stores.setdefault(asyncio.get_running_loop(), {})

    @property
    def store(self) -> RecordStore:
        """The record store of the running event loop, creating its client on first use."""
        store: RecordStore = self.store_for(None)
        return store

    async def run(
        self,
        event_id: str | None,
        suffix: str,
        handler: AsyncHandler,
        *,
        mode: Mode = Mode.LEASE,
        payload: bytes | str | None = None,
        event_time: datetime | None = None,
        document_path: str | None = None,
        subject: str | None = None,
        database: str | None = None,
        reconcile: Reconcile | None = None,
        on_ambiguous: str = RERUN,
        source: str | None = None,
    ) -> Outcome:
        """Await `handler` for this event unless its record says it already ran, with an
        `AsyncDelivery`. Returns and raises as `Deduplicator.run`; `ConfigError` for a handler
        that is not an `async def`. `reconcile` may be `def` or `async def` (awaited)."""
        fields = (payload, event_time, document_path, subject, database, reconcile, on_ambiguous)
        options = EventOptions(mode if type(mode) is Mode else Mode(mode), *fields, source)
        options = self.checked(options, "AsyncDeduplicator.run", handler)
        return await self.run_event(event_id, suffix, handler, options)

    async def run_event(
        self, event_id: str | None, suffix: str, handler: AsyncHandler, options: EventOptions
    ) -> Outcome:
        """`run` with its options as one value, taken as checked (`Deduplicator.run_event`)."""
        with self.telemetry.delivery(suffix, options.mode) as observed:
            io: FlowIO
            io, same_database = self.records_for(options.database)
            started = self.begin(
                io,
                event_id,
                suffix,
                options,
                observed=observed,
                same_database=same_database,
                kinds=ASYNC_DELIVERIES,
            )
            if isinstance(started, Outcome):
                return started
            return await run_flow(started, _invoker(started, io.client, handler, observed))


def _invoker(run: Run, client: Any, handler: AsyncHandler, observed: DeliveryTrace) -> Invoke:
    """`kernel.front_door.invoker` for an async `handler`, with an `AsyncDelivery`."""
    clock = observed.clock

    async def invoke(writer: object) -> object:
        delivery = run.delivery(client, writer, ASYNC_DELIVERIES)
        started = clock()
        try:
            return await handler(delivery)
        finally:
            observed.handler_seconds += clock() - started

    return invoke


def default_async_deduplicator(config: DedupConfig | None = None) -> AsyncDeduplicator:
    """The process's shared AsyncDeduplicator for `config` (`default_instance`)."""
    return default_instance(AsyncDeduplicator, config)
