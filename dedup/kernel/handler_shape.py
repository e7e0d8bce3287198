"""The checks of a handler and its options, each a `ConfigError` naming the function and what
to write instead: at import, a function a firebase-functions decorator already wrapped or one
its trigger kind cannot call (`check_handler`); at import and on every explicit `run`
(`check_run`), a handler of the other side than its front door and the choice of what an
ambiguous delivery does (docs/library.md, "the other mistakes of a first function")."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import FunctionType
from typing import TYPE_CHECKING, Any

from dedup.errors import ConfigError
from dedup.kernel.record import ON_AMBIGUOUS
from dedup.platform.firebase_internals import platform_wrapped

if TYPE_CHECKING:
    from dedup.kernel.delivery import EventOptions

__all__ = [
    "check_ambiguity",
    "check_handler",
    "check_handler_side",
    "check_run",
    "check_sync_reconcile",
    "is_async_handler",
]


def check_handler(
    handler: Callable[..., Any],
    owner: str,
    *,
    decorator: str,
    parameters: tuple[str, ...],
    platform: str,
    is_async: bool,
) -> None:
    """Refuse `handler` (named `owner`) under `@decorator(...)`: `ConfigError` when a
    firebase-functions decorator already wrapped it (naming the order: `platform` above), or
    when it cannot be called with `parameters`. A signature Python cannot read passes."""
    name = getattr(handler, "__name__", "handler")
    if platform_wrapped(handler):
        raise ConfigError(
            f"{owner} is already wrapped by a firebase-functions decorator, so @{decorator} "
            "would never run (the function would deploy without it); put the platform's "
            f"decorator first, right above @{decorator}:\n"
            f"    {platform}\n    @{decorator}(...)\n    def {name}(...): ..."
        )
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*parameters)
    except TypeError:
        keyword = "async def" if is_async else "def"
        arguments = ", ".join(parameters)
        raise ConfigError(
            f"{owner} cannot be called as {name}({arguments}): @{decorator} calls its handler "
            f"with {len(parameters)} argument{'s' if len(parameters) > 1 else ''}; write it as "
            f"`{keyword} {name}({arguments})` (its signature is {name}{signature})"
        ) from None


def is_async_handler(handler: object) -> bool:
    """True when calling `handler` returns a coroutine: an `async def` function (or a partial
    of one), or an object whose `__call__` is one."""
    if type(handler) is FunctionType and not handler.__dict__:
        # `inspect.iscoroutinefunction` of a plain function without attributes (so without
        # `inspect.markcoroutinefunction`'s mark): its code's flag, read at every `run`.
        return bool(handler.__code__.co_flags & inspect.CO_COROUTINE)
    if inspect.iscoroutinefunction(handler):
        return True
    if type(handler) is FunctionType:  # a plain `def`: its type's `__call__` is not async
        return False
    return callable(handler) and inspect.iscoroutinefunction(type(handler).__call__)


def check_handler_side(handler: object, *, awaited: bool) -> None:
    """Refuse (`ConfigError`) a handler of the other side than its front door: an `async def`
    one where it is called (`Deduplicator`), a `def` one where it is awaited."""
    if is_async_handler(handler) == awaited:
        return
    name = repr(getattr(handler, "__qualname__", handler))
    if awaited:
        raise ConfigError(
            f"{name} is not an async function: AsyncDeduplicator awaits `async def` handlers; "
            "run a `def` handler with dedup.Deduplicator"
        )
    raise ConfigError(
        f"{name} is an async function: Deduplicator runs synchronous handlers only (its "
        "coroutine would never be awaited); await dedup.aio.AsyncDeduplicator().run(...) "
        "instead, or write the handler with `def`"
    )


def check_ambiguity(where: str, reconcile: object, on_ambiguous: object) -> None:
    """Refuse, naming `where`, an `on_ambiguous` other than "rerun" or "skip", or a
    `reconcile` that is not callable (`ConfigError`)."""
    if on_ambiguous not in ON_AMBIGUOUS:
        choices = ", ".join(repr(value) for value in ON_AMBIGUOUS)
        raise ConfigError(f"{where}: on_ambiguous={on_ambiguous!r} is not one of {choices}")
    if reconcile is not None and not callable(reconcile):
        raise ConfigError(
            f"{where}: reconcile={reconcile!r} is not callable; pass a function "
            "reconcile(delivery) -> True | False | None"
        )


def check_sync_reconcile(where: str, reconcile: object) -> None:
    """Refuse an `async def` reconcile for a `def` handler (nothing would await it)."""
    if reconcile is not None and is_async_handler(reconcile):
        raise ConfigError(
            f"{where}: reconcile is an async function but the handler is not: write reconcile "
            "with `def`, or make the handler `async def`"
        )


def check_run(options: EventOptions, handler: object, where: str, *, awaited: bool) -> None:
    """Refuse (`ConfigError` naming `where`) the arguments of an explicit `run` of a front door
    whose handlers are `awaited` or not: `check_handler_side`, `check_ambiguity`, and on the
    sync side `check_sync_reconcile`."""
    plain_def = (  # of the sync side as `is_async_handler` reads it, without its calls
        not awaited
        and type(handler) is FunctionType
        and not handler.__dict__
        and not handler.__code__.co_flags & inspect.CO_COROUTINE
    )
    if not plain_def:
        check_handler_side(handler, awaited=awaited)
    if options.chooses_ambiguity:
        check_ambiguity(where, options.reconcile, options.on_ambiguous)
        if not awaited:
            check_sync_reconcile(where, options.reconcile)
