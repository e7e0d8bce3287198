"""One entrance for every trigger kind: what `trigger_once`, `task_once`, `idempotent_http`
and `idempotent_callable` do before their first delivery, done in one place.

A decorator factory calls `gate(kind, suffix, ...)` when it is called (at import time): the
suffix is checked, `config` together with `deduplicator` refused, the mode converted. The
decorator then calls `Gate.admit(handler)`: the handler is found sync or async and refused
with a `ConfigError` naming it and what to use instead when its trigger kind cannot serve it,
a given deduplicator of the wrong kind is refused, the suffix is registered, and the returned
`Entrance` copies the handler's name onto the wrapper (`Entrance.identify`) and resolves the
deduplicator of each delivery (`Entrance.deduplicator`).

Each factory's `reconcile` and `on_ambiguous` (what a delivery that may repeat an effect does,
`dedup.kernel.ambiguity`) are checked here too, and every delivery of the function passes them on.
So does its time budget: the timeout the function declares to firebase-functions, found at its
first delivery (`DeclaredTimeout`, `Entrance.options`; `DedupConfig.time_budget`).

The configuration of the process is read from the environment once, by the process's default
deduplicator; `process_config()` is that object, and every entrance, the HTTP deduplicator and
the start-up checks use it. It is read when the first function without a `config` or a
`deduplicator` is declared, so a misspelled or malformed DEDUP_* variable stops the import of
`main.py` with the `ConfigError` that names it, before any event arrives.

The record key of a delivery, in the configured layout, is computed in one place,
`DeduplicatorBase.record_key`: the flows of every mode call it, and `record_key(deduplicator,
...)` here is the same call for the trigger kinds that read a record back (HTTP replays).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

from dedup.entrances.suffixes import DEFAULT_REGISTRY, SuffixRegistry
from dedup.errors import ConfigError
from dedup.kernel.delivery import EventOptions, Reconcile
from dedup.kernel.front_door import Deduplicator, default_deduplicator
from dedup.kernel.handler_shape import (
    check_ambiguity,
    check_handler,
    check_sync_reconcile,
    is_async_handler,
)
from dedup.kernel.record import RERUN, Mode
from dedup.kernel.transitions import validate_suffix
from dedup.platform.firebase_internals import (
    function_timeout_of,
    global_timeout_seconds,
    on_the_platform,
)

if TYPE_CHECKING:  # dedup.aio (the async client's stack) is imported for async handlers only
    from dedup.aio.front_door import AsyncDeduplicator
    from dedup.config import DedupConfig

type AnyDeduplicator = Deduplicator | AsyncDeduplicator
"""A front door of either kind."""


class EntranceKind(NamedTuple):
    """What one kind of delivery can serve; the rest of its adapter is its own module's."""

    decorator: str
    """The decorator's name, as error messages quote it."""
    serves_async: bool
    """An `async def` handler is served (by `AsyncDeduplicator`)."""
    instead: str
    """What to do with an `async def` handler when it is not served."""
    parameters: tuple[str, ...] = ("event", "delivery")
    """The arguments every handler of the kind is called with, as error messages name them."""
    platform: str = "@firestore_fn.on_document_created(...)"
    """A platform decorator that goes above this one, as the decorator-order error shows it."""
    refuses_reused_keys: bool = False
    """A key reused with another payload is refused (`on_payload_mismatch="raise"`) and the
    stored result is always read (no key cache): the HTTP kinds, which replay answers."""


EVENTS = EntranceKind("trigger_once", serves_async=True, instead="")
"""CloudEvents (`trigger_once`): `def` and `async def` handlers."""

TASKS = EntranceKind(
    "task_once",
    serves_async=False,
    instead="write it with `def` (firebase-functions calls task handlers synchronously)",
    parameters=("request", "delivery"),
    platform="@tasks_fn.on_task_dispatched(...)",
)
"""Cloud Tasks dispatches (`task_once`)."""

HTTP = EntranceKind(
    "idempotent_http",
    serves_async=False,
    instead=(
        "write it with `def` (Flask, under functions_framework.http or https_fn.on_request, "
        "calls handlers synchronously), or run an async client from it with asyncio.run"
    ),
    parameters=("call",),
    platform="@https_fn.on_request()",
    refuses_reused_keys=True,
)
"""HTTP requests with an `Idempotency-Key` (`idempotent_http`)."""

CALLABLE = EntranceKind(
    "idempotent_callable",
    serves_async=False,
    instead="write it with `def` (https_fn.on_call calls handlers synchronously)",
    parameters=("request", "delivery"),
    platform="@https_fn.on_call()",
    refuses_reused_keys=True,
)
"""Callable requests with an `idempotencyKey` (`idempotent_callable`)."""


def process_config() -> DedupConfig:
    """The process's configuration: that of its default deduplicator
    (`dedup.kernel.front_door.default_deduplicator()`), read from the environment
    (`DedupConfig.from_env`) once, when it is first needed, and kept for the life of the process.
    Every entrance without a `config`, the HTTP deduplicator and the start-up checks use this one
    object. Raises `ConfigError` for a bad DEDUP_* variable (and reads again on the next call)."""
    return default_deduplicator().config


def refusing_config(config: DedupConfig) -> DedupConfig:
    """`config` as the HTTP kinds need it: reused keys refused, no key cache."""
    return replace(config, cache_size=0, on_payload_mismatch="raise")


def shared_deduplicator(kind: EntranceKind, config: DedupConfig | None = None) -> Deduplicator:
    """The process's shared `Deduplicator` of `kind` for `config`; None: the process's default
    deduplicator, or for the HTTP kinds the one built from `process_config()`."""
    if config is None and not kind.refuses_reused_keys:
        return default_deduplicator()
    chosen = config if config is not None else process_config()
    if kind.refuses_reused_keys:
        chosen = refusing_config(chosen)
    return default_deduplicator(chosen)


def record_key(deduplicator: AnyDeduplicator, event_id: str, suffix: str) -> str:
    """The document id of the record of (event_id, suffix) in the deduplicator's key layout:
    `DeduplicatorBase.record_key`, which the flows of every mode use too."""
    return deduplicator.record_key(event_id, suffix)


def owner_of(handler: Callable[..., Any]) -> str:
    """`module.qualname` of a handler, as registries and error messages name it."""
    name = getattr(handler, "__qualname__", None) or getattr(handler, "__name__", repr(handler))
    return f"{getattr(handler, '__module__', '?')}.{name}"


_COPIED_ATTRIBUTES = ("__module__", "__name__", "__qualname__", "__doc__")


class DeclaredTimeout:
    """The timeout the function an entrance serves declares to the platform, found once, on
    its first delivery: the platform's decorator wraps the entrance's wrapper after `admit`
    (`dedup.platform.firebase_internals.function_timeout_of`)."""

    def __init__(self) -> None:
        """Nothing found yet; `Entrance.identify` names the wrapper to look for."""
        self.wrapper: object = None
        """The entrance's wrapper, which the platform's decorator wraps (`Entrance.identify`)."""
        self._found: list[int | None] = []
        self._lock = threading.Lock()

    def seconds(self, check: Callable[[int], None]) -> int | None:
        """The declared timeout (None: none is known), `check`ed once when found; a `check`
        that raises leaves it unfound, so every delivery raises until the setting is fixed."""
        if not self._found:
            with self._lock:
                if not self._found:
                    inner = self.wrapper
                    found = (
                        function_timeout_of(inner) if callable(inner) else global_timeout_seconds()
                    )
                    if found is not None:
                        check(found)
                    self._found.append(found)
        return self._found[0]


class Entrance(NamedTuple):
    """An admitted handler: what each delivery of its trigger kind needs from the entrance."""

    gate: Gate
    """The decorator's checked arguments."""
    owner: str
    """`module.qualname` of the handler."""
    is_async: bool
    """The handler is an `async def` (served by `AsyncDeduplicator`)."""
    handler: Callable[..., Any]
    timeout: DeclaredTimeout
    """The timeout the function declares, found on its first delivery (`options`)."""

    @property
    def suffix(self) -> str:
        """The function's suffix (registered)."""
        return self.gate.suffix

    @property
    def mode(self) -> Mode:
        """The dedup mode of every delivery."""
        return self.gate.mode

    @property
    def options(self) -> EventOptions:
        """The function's checked options (`Gate.options`) with the timeout it declares, for
        each delivery to complete: its time budget (`DedupConfig.time_budget`). On the
        platform, a declared timeout that the lease does not cover raises `ConfigError`
        (`DedupConfig.check_lease_covers`), on every delivery until the setting is fixed."""
        declared = self.timeout.seconds(self._check_lease)
        return self.gate.options._replace(budget=self._config().time_budget(declared))

    def _config(self) -> DedupConfig:
        given = self.gate.given
        return given.config if given is not None else self.gate.config or process_config()

    def _check_lease(self, timeout: int) -> None:
        if on_the_platform(os.environ):  # locally, in tests and the emulator: short leases
            self._config().check_lease_covers(timeout)

    @property
    def reconcile(self) -> Reconcile | None:
        """Asked whether an earlier attempt produced the effect (`dedup.kernel.ambiguity`)."""
        return self.gate.reconcile

    @property
    def on_ambiguous(self) -> str:
        """What an ambiguous delivery does when nothing could tell: "rerun" or "skip"."""
        return self.gate.on_ambiguous

    def deduplicator(self) -> Deduplicator:
        """The deduplicator of a sync handler's delivery: the given one, else the shared one
        (created on the first delivery, not at import)."""
        given = self.gate.given
        if given is not None:
            assert isinstance(given, Deduplicator)
            return given
        return shared_deduplicator(self.gate.kind, self.gate.config)

    def async_deduplicator(self) -> AsyncDeduplicator:
        """The deduplicator of an async handler's delivery (see `deduplicator`)."""
        from dedup.aio.front_door import AsyncDeduplicator, default_async_deduplicator

        given = self.gate.given
        if given is not None:
            assert isinstance(given, AsyncDeduplicator)
            return given
        chosen = self.gate.config if self.gate.config is not None else process_config()
        return default_async_deduplicator(chosen)

    def identify[F](self, wrapper: F) -> F:
        """Copy the handler's identity (module, name, qualname, doc) onto its wrapper, but not
        its signature: frameworks that inspect the wrapper must see the wrapper's."""
        for attribute in _COPIED_ATTRIBUTES:
            setattr(wrapper, attribute, getattr(self.handler, attribute, None))
        self.timeout.wrapper = wrapper  # what the platform's decorator wraps
        return wrapper


class Gate(NamedTuple):
    """A decorator factory's checked arguments, waiting for the handler (`admit`)."""

    kind: EntranceKind
    suffix: str
    given: AnyDeduplicator | None
    config: DedupConfig | None
    registry: SuffixRegistry
    options: EventOptions
    """The function's options, checked (mode, reconcile, on_ambiguous): each delivery
    completes them with its event's (`EventOptions._replace`) and hands them to the front
    door's `run_event`."""

    @property
    def mode(self) -> Mode:
        """The dedup mode of every delivery."""
        return self.options.mode

    @property
    def reconcile(self) -> Reconcile | None:
        """Lease mode: asked whether an earlier attempt produced the effect."""
        return self.options.reconcile

    @property
    def on_ambiguous(self) -> str:
        """Lease mode: what an ambiguous delivery does when nothing could tell."""
        return self.options.on_ambiguous

    def admit(self, handler: Callable[..., Any]) -> Entrance:
        """Check `handler` against the trigger kind and register its suffix.

        Raises `ConfigError` for a function a firebase-functions decorator already wrapped
        (the decorators in the wrong order), a handler that cannot take the kind's arguments
        (`dedup.kernel.handler_shape`), an `async def` handler the kind cannot serve, a given
        deduplicator of the other kind, or an `async def` reconcile of a `def` handler;
        `DuplicateSuffix` for a suffix already taken.
        """
        owner = owner_of(handler)
        is_async = is_async_handler(handler)
        check_handler(
            handler,
            owner,
            decorator=self.kind.decorator,
            parameters=self.kind.parameters,
            platform=self.kind.platform,
            is_async=is_async,
        )
        if not is_async:
            check_sync_reconcile(owner, self.reconcile)
        if is_async and not self.kind.serves_async:
            raise ConfigError(
                f"{owner} is an async function: {self.kind.decorator} serves synchronous "
                f"handlers only (its coroutine would never be awaited); {self.kind.instead}"
            )
        wanted: type[AnyDeduplicator] = Deduplicator
        if is_async:
            from dedup.aio.front_door import AsyncDeduplicator

            wanted = AsyncDeduplicator
        if self.given is not None and not isinstance(self.given, wanted):
            raise ConfigError(
                f"{owner} needs a {wanted.__name__}, got a {type(self.given).__name__}: pass "
                "dedup.aio.AsyncDeduplicator for an `async def` handler, dedup.Deduplicator "
                "for a `def` one"
            )
        self.registry.register(self.suffix, owner, handler=handler)
        return Entrance(self, owner, is_async, handler, DeclaredTimeout())


def gate(
    kind: EntranceKind,
    suffix: str,
    mode: Mode | str,
    config: DedupConfig | None,
    deduplicator: AnyDeduplicator | None,
    registry: SuffixRegistry | None,
    reconcile: Reconcile | None = None,
    on_ambiguous: str = RERUN,
) -> Gate:
    """Check a decorator factory's arguments at import time: `InvalidSuffix` for a bad suffix,
    `ConfigError` for a bad or misspelled DEDUP_* variable when the function uses the process's
    configuration (read here, once per process: `process_config`) or, on the platform, for a
    lease shorter than the global timeout (`dedup.platform.firebase_internals`), for both `config`
    and `deduplicator`, for an unknown mode, for an `on_ambiguous` other than "rerun"/"skip" or a
    `reconcile` that is not callable (naming the function), or (HTTP kinds) for a deduplicator
    that would not refuse a reused key."""
    validate_suffix(suffix)
    check_ambiguity(f"{kind.decorator}({suffix!r})", reconcile, on_ambiguous)
    if config is not None and deduplicator is not None:
        raise ConfigError(f"pass either config or deduplicator to {kind.decorator}, not both")
    if config is None and deduplicator is None:
        read = process_config()  # the process's one read of DEDUP_*: a bad one stops the import
        timeout = global_timeout_seconds()
        if timeout is not None and on_the_platform(os.environ):
            read.check_lease_covers(timeout)  # a lease that is too short: refused at import
    try:
        chosen_mode = Mode(mode)
    except ValueError:
        modes = ", ".join(m.value for m in Mode)
        raise ConfigError(f"{kind.decorator}: mode {mode!r} is not one of {modes}") from None
    if (
        kind.refuses_reused_keys
        and deduplicator is not None
        and deduplicator.config.on_payload_mismatch != "raise"
    ):
        raise ConfigError(
            f"a deduplicator for {kind.decorator} must refuse reused keys: build it with "
            "DedupConfig(on_payload_mismatch='raise', cache_size=0)"
        )
    return Gate(
        kind=kind,
        suffix=suffix,
        given=deduplicator,
        config=config,
        registry=registry if registry is not None else DEFAULT_REGISTRY,
        options=EventOptions(chosen_mode, reconcile=reconcile, on_ambiguous=on_ambiguous),
    )
