"""The front door `Deduplicator`, its per-instance state (clients, record stores, memory of
keys), what it shares with `dedup.aio.AsyncDeduplicator` (`DeduplicatorBase`: the checks before
any claim, the flow of each mode) and the process's shared instances (`default_instance`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Coroutine, Mapping
from datetime import datetime, timedelta
from functools import cache
from typing import TYPE_CHECKING, Any, cast

from google.cloud import firestore

from dedup.config import DEFAULT_DATABASE, DedupConfig
from dedup.errors import StoreUnavailable
from dedup.kernel.budget import Budget
from dedup.kernel.delivery import (
    SYNC_DELIVERIES,
    DeliveryKinds,
    EventOptions,
    Handler,
    Outcome,
    OutcomeKind,
    Reconcile,
    Step,
    StepHook,
    drive,
)
from dedup.kernel.handler_shape import check_run
from dedup.kernel.record import RERUN, Mode, storable_text
from dedup.kernel.run import LiveLeases, Run, SentKeys
from dedup.kernel.transitions import dedup_key, payload_hash, storable_event_id
from dedup.kernel.turns import KeyTurns
from dedup.telemetry import DeliveryTrace, Telemetry

if TYPE_CHECKING:  # the flows and the store are imported by the first delivery, not at import
    from dedup.kernel.flow_io import FlowIO, Invoke
    from dedup.kernel.store import RecordStore

type Flow = Callable[[Run, Invoke], Coroutine[Any, Any, Outcome]]
"""`await flow(run, invoke)`: claim, run the handler through `invoke`, record the outcome."""


@cache
def flows() -> Mapping[Mode, Flow]:
    """The flow of each mode, imported by the first delivery (only `Run.delivery` else
    branches on the mode)."""
    from dedup.kernel.atomic import run_transaction, run_write_only
    from dedup.kernel.lease import run_lease

    return {
        Mode.LEASE: run_lease,
        Mode.TRANSACTION: run_transaction,
        Mode.WRITE_ONLY: run_write_only,
    }


async def run_flow(run: Run, invoke: Invoke) -> Outcome:
    """Run the flow of `run.mode`; a store failure is logged as `unavailable` and re-raised."""
    try:
        return await flows()[run.mode](run, invoke)
    except StoreUnavailable as exc:
        run.finish(OutcomeKind.UNAVAILABLE, error=str(exc))
        raise


def invoker(
    run: Run, client: Any, handler: Handler, observed: DeliveryTrace | None = None
) -> Invoke:
    """How the flows call a sync `handler` (`Run.delivery` on `client`), timed in `observed`."""
    if observed is None:

        async def invoke(writer: object) -> object:
            return handler(run.delivery(client, writer))

        return invoke
    clock = observed.clock

    async def timed(writer: object) -> object:
        delivery = run.delivery(client, writer)
        started = clock()
        try:
            return handler(delivery)
        finally:
            observed.handler_seconds += clock() - started

    return timed


class DeduplicatorBase:
    """What both front doors share: the config, the instance's caches, the checks (`begin`)."""

    def __init__(
        self,
        config: DedupConfig | None = None,
        telemetry: Telemetry | None = None,
        *,
        client: Any = None,
        client_factory: Callable[[], Any] | None = None,
        records: Any = None,
    ) -> None:
        """Defaults: `DedupConfig.from_env()`, the global providers; the first client, made on
        first use: `client`, `client_factory()`, else `new_client`; `records` replaces Firestore."""
        self._records = records
        self._given_client = client
        self._client_factory = client_factory
        self._lock = threading.Lock()
        self._turns = KeyTurns()
        self.config = config if config is not None else DedupConfig.from_env()
        self.telemetry = telemetry if telemetry is not None else Telemetry()
        """Spans and metrics of the deliveries (`dedup.telemetry`)."""
        self.sent_keys = SentKeys(self.config.cache_size)
        """The LRU of keys known sent (exposed for inspection)."""
        self.live_leases = LiveLeases()
        """Keys whose lease this instance knows to be live (`dedup.kernel.run.LiveLeases`)."""
        self._step_hooks: tuple[StepHook, ...] = ()

    def new_client(self, database: str, *, like: Any = None) -> Any:
        """A client of this front door's side on `database`, with the project and credentials
        of the client `like`, else of the config."""
        raise NotImplementedError

    def new_store(self, client: Any) -> RecordStore:
        """The record store over `client`, taking turns per key in this instance's table."""
        from dedup.kernel.store import RecordStore

        collection, timeout = self.config.collection, self.config.rpc_timeout_seconds
        return RecordStore(client, collection, turns=self._turns, rpc_timeout_seconds=timeout)

    def store_table(self) -> dict[str | None, Any]:
        """The stores made so far by database (None: the first client's) of this thread/loop."""
        raise NotImplementedError

    def first_store(self) -> Any:
        """The record store of the first client, made on first use."""
        with self._lock:
            return self._first_store(self.store_table())

    def _first_store(self, stores: dict[str | None, Any]) -> Any:
        first = stores.get(None)
        if first is None:
            client = self._given_client
            if client is None and self._client_factory is not None:
                client = self._client_factory()
            if client is None:
                client = self.new_client(self.config.database or DEFAULT_DATABASE)
            first = stores[None] = self.new_store(client)
        return first

    def store_for(self, event_database: str | None = None) -> Any:
        """The record store for an event from `event_database`: in the config's database
        (DEDUP_DATABASE), else the event's, else the first client's."""
        if event_database is None and not self.config.database:
            first = self.store_table().get(None)  # once made, the answer needs no lock
            if first is not None:
                return first
        with self._lock:
            stores = self.store_table()
            first = self._first_store(stores)
            wanted = self.config.database or event_database or first.database
            if wanted == first.database:
                return first
            found = stores.get(wanted)
            if found is None:
                found = stores[wanted] = self.new_store(self.new_client(wanted, like=first.client))
            return found

    awaits_handlers = False
    """The side of this front door: True for `AsyncDeduplicator` (its handlers are awaited)."""

    def checked(self, options: EventOptions, where: str, handler: object) -> EventOptions:
        """`options` of an explicit `run` call, checked with its `handler` (`check_run`:
        `ConfigError` naming `where`)."""
        check_run(options, handler, where, awaited=self.awaits_handlers)
        return options

    def records_for(self, event_database: str | None = None) -> tuple[Any, bool]:
        """Where an event from `event_database` has its records, and whether in its own database."""
        if self._records is not None:
            return self._records, True
        if event_database is None and not self.config.database:  # `store_for`'s first case
            first = self.store_table().get(None)
            if first is not None:
                return first, True
        store = self.store_for(event_database)
        same = event_database is None or event_database == store.database
        return store, same

    def record_key(self, event_id: str | None, suffix: str) -> str:
        """The record's id of (event_id, suffix) in the key layout, as `dedup_key`."""
        return dedup_key(event_id, suffix, self.config.key_layout)

    def on_step(self, hook: StepHook) -> Callable[[], None]:
        """Call `hook(step, key)` at each `Step` of the next deliveries; returns its remover."""
        with self._lock:
            self._step_hooks = (*self._step_hooks, hook)

        def remove() -> None:
            with self._lock:
                self._step_hooks = tuple(h for h in self._step_hooks if h is not hook)

        return remove

    def begin(
        self,
        io: FlowIO,
        event_id: str | None,
        suffix: str,
        options: EventOptions,
        *,
        observed: DeliveryTrace | None = None,
        same_database: bool = True,
        kinds: DeliveryKinds = SYNC_DELIVERIES,
    ) -> Run | Outcome:
        """The delivery's `Run` (watched by `observed`), or its outcome when it ends before
        any claim (self-trigger, only if `same_database`; too old; a duplicate in the cache).
        Raises as `record_key`, `PayloadMismatch` for a cached key under that policy. `kinds`:
        the delivery types of the handler's side."""
        key = self.record_key(event_id, suffix)
        assert event_id is not None  # record_key rejects a missing id
        config = self.config
        fingerprint = ambiguity = None
        payload, document_path = options.payload, options.document_path
        if payload is not None:
            raw = payload.encode("utf-8", "surrogatepass") if isinstance(payload, str) else payload
            fingerprint = payload_hash(raw)
        if options.chooses_ambiguity:
            from dedup.kernel.ambiguity import AmbiguityChoice

            ambiguity = AmbiguityChoice(options.on_ambiguous, options.reconcile, io.client, kinds)
        subject = options.subject if options.subject is not None else document_path
        step_hooks = self._step_hooks
        run = Run(
            config=config,
            io=io,
            sent_keys=self.sent_keys,
            live_leases=self.live_leases,
            mode=options.mode,
            # ASCII holds no lone surrogate: as `storable_event_id` would keep it
            event_id=event_id if event_id.isascii() else storable_event_id(event_id),
            suffix=suffix,
            key=key,
            payload_hash=fingerprint,
            subject=None if subject is None else _label(subject),
            source=None if options.source is None else _label(options.source),
            step_hooks=step_hooks,
            ambiguity=ambiguity,
            budget=Budget.of_delivery(options.budget or config.time_budget(), config),
        )
        if observed is not None:
            observed.watch(run)
        if step_hooks:
            run.step(Step.BEFORE_CLAIM)
        if document_path is not None and same_database and self._inside_collection(document_path):
            return run.finish(OutcomeKind.SELF_TRIGGER)
        if options.event_time is not None and self._too_old(options.event_time):
            return run.finish(OutcomeKind.TOO_OLD)
        known, cached_hash = self.sent_keys.lookup(key)
        if known:
            run.check_payload(cached_hash)
            return run.finish(OutcomeKind.DUPLICATE_CACHED)
        return run

    def _inside_collection(self, document_path: str) -> bool:
        path = document_path.strip("/")
        if "/documents/" in path:  # full resource name projects/p/databases/d/documents/...
            path = path.split("/documents/", 1)[1]
        collection = self.config.collection
        return path == collection or path.startswith(collection + "/")

    def _too_old(self, event_time: datetime | None) -> bool:
        # Judged on the instance clock: a skew of minutes is nothing next to the hours a
        # maximum event age usually is, and no database read gives a time here.
        max_age = self.config.max_event_age_seconds
        if max_age is None or event_time is None:
            return False
        return self.config.clock() - event_time > timedelta(seconds=max_age)


class Deduplicator(DeduplicatorBase):
    """Runs handlers at most once per (event id, suffix), effectively once with retries.
    Thread-safe. Given a `config`, made without network or environment (the client comes with
    the first delivery). `async def` handlers: `dedup.aio`."""

    def __init__(
        self,
        config: DedupConfig | None = None,
        *,
        client: firestore.Client | None = None,
        client_factory: Callable[[], firestore.Client] | None = None,
        telemetry: Telemetry | None = None,
        records: FlowIO | None = None,
    ) -> None:
        """As `DeduplicatorBase`; `records`: a `FlowIO` whose coroutines never suspend."""
        super().__init__(
            config, telemetry, client=client, client_factory=client_factory, records=records
        )
        self._stores: dict[str | None, RecordStore] = {}

    def new_client(self, database: str, *, like: Any = None) -> firestore.Client:
        """A sync `firestore.Client` on `database` (see `DeduplicatorBase.new_client`)."""
        if like is None:
            return firestore.Client(project=self.config.project, database=database)
        from dedup.platform.firestore_internals import credentials_of

        credentials = credentials_of(like)
        return firestore.Client(project=like.project, credentials=credentials, database=database)

    def store_table(self) -> dict[str | None, RecordStore]:
        """One table for every thread."""
        return self._stores

    @property
    def store(self) -> RecordStore:
        """`first_store`."""
        return cast("RecordStore", self.first_store())

    @property
    def records(self) -> FlowIO:
        """Where this instance keeps its records (`records_for`): read them here, not `store`."""
        return cast("FlowIO", self.records_for()[0])

    def records_database(self, event_database: str | None = None) -> str:
        """Where the records of an event from `event_database` live (as `store_for` chooses)."""
        return self.config.database or event_database or self.store.database

    def run(
        self,
        event_id: str | None,
        suffix: str,
        handler: Handler,
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
        """Run `handler` for this event unless its record says it already ran; each keyword
        means what the `EventOptions` field of its name says. Returns the outcome when the
        platform should stop retrying; raises `LeaseHeld`, `LeaseLost`, `StoreUnavailable` or the
        handler's exception when it should retry; `MissingEventId`/`InvalidSuffix` for a bad key,
        `KeyCollision`, `PayloadMismatch` under that policy, `ConfigError` for an `async def`
        handler, `DatabaseMismatch` when an atomic handler writes outside `records_database`."""
        fields = (payload, event_time, document_path, subject, database, reconcile, on_ambiguous)
        options = EventOptions(mode if type(mode) is Mode else Mode(mode), *fields, source)
        return self.run_event(
            event_id, suffix, handler, self.checked(options, "Deduplicator.run", handler)
        )

    def run_event(
        self, event_id: str | None, suffix: str, handler: Handler, options: EventOptions
    ) -> Outcome:
        """`run` with its options as one value, taken as checked (`checked`, or an entrance's
        gate at import). Returns and raises as `run`."""
        with self.telemetry.delivery(suffix, options.mode) as observed:
            io, same = self.records_for(options.database)
            started = self.begin(
                io, event_id, suffix, options, observed=observed, same_database=same
            )
            if isinstance(started, Outcome):
                return started
            invoke = invoker(started, io.client, handler, observed)
            return drive(run_flow(started, invoke))


_default_lock = threading.Lock()
_defaults: dict[tuple[object, DedupConfig | None], object] = {}


def default_instance[D](
    kind: Callable[[DedupConfig | None], D], config: DedupConfig | None = None
) -> D:
    """The process's shared front door of class `kind` for `config` (None: the environment),
    made on first request without network; an equal config gets the same instance."""
    with _default_lock:
        found = _defaults.get((kind, config))
        if found is None:
            found = _defaults[(kind, config)] = kind(config)
        return cast(D, found)


def default_deduplicator(config: DedupConfig | None = None) -> Deduplicator:
    """The process's shared Deduplicator for `config` (`default_instance`)."""
    return default_instance(Deduplicator, config)


MAX_LABEL_BYTES = 6_144
"""The most UTF-8 bytes of an event's `subject` or `source` a record keeps; the rest is cut."""


def _label(text: str | None) -> str | None:
    if not isinstance(text, str) or (text.isascii() and len(text) <= MAX_LABEL_BYTES):
        return text
    return storable_text(text, max_bytes=MAX_LABEL_BYTES)
