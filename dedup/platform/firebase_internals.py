"""The private parts of firebase-functions that dedup reads, all here: what
`set_global_options` and a function's decorator declared (the function timeout: a delivery's
time budget, which the lease must outlast on the platform),
and the SDK's own parsers of a raw Firestore and Pub/Sub event (the template's strict
boundary hands the function exactly the event firebase-functions would build).

## Global options

`trigger_once` runs under the platform's decorator, which declares a function's own
`timeout_sec` only after `trigger_once` has returned; what a function can see at its declaration
is the global options that `set_global_options` set before it. So, where the instance runs on
the platform (`on_the_platform`), a global timeout that `DEDUP_LEASE_SECONDS` does not outlast
(plus `DEDUP_RPC_TIMEOUT_SECONDS`) stops the import with the `ConfigError` that names the value
to set (`dedup.entrances.gate.gate`); a function's own timeout is checked at its first delivery
(below). Locally, in tests and in the Functions emulator nothing is checked: short leases there
are deliberate.

## A function's own timeout

A function's own `timeout_sec` is known once the platform's decorator has run, after the
import: on its first delivery, an entrance finds the firebase-functions function that wraps it
(`platform_function_of`: the attribute of its module whose `__wrapped__` chain reaches the
entrance's wrapper) and reads its endpoint's `timeoutSeconds` (`declared_timeout`), else the
global `timeout_sec` (`function_timeout_of`). That is the delivery's time budget
(`dedup.config.DedupConfig.time_budget`); on the platform a lease that does not cover it is
refused then, with the `ConfigError` that names the value to set.

## Private names read, each checked with firebase-functions 0.6.0 (pinned in requirements.txt)
- `firebase_functions.options._GLOBAL_OPTIONS` (the `RuntimeOptions` that `set_global_options`
  replaces), its `timeout_sec`. Nothing is read when the options module is not loaded.
- `firebase_functions.firestore_fn._firestore_endpoint_handler(func, event_type,
  document_pattern, raw)` and `firebase_functions.private.path_pattern.PathPattern`: how
  `on_document_*` turns a raw CloudEvent into the `Event` its handler gets.
- `firebase_functions.pubsub_fn._message_handler(func, raw)`: the same for
  `on_message_published` (it rewrites the raw data in place, so it runs once per event).
- `__firebase_endpoint__`, which every firebase-functions decorator sets on the function it
  returns (its discovery finds the functions of main.py by it): `platform_wrapped`; and its
  `timeoutSeconds` (the decorator's `timeout_sec`, else the global one): `declared_timeout`.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Mapping
from typing import Any, cast


def global_timeout_seconds() -> int | None:
    """The `timeout_sec` of `set_global_options`, when one was set as a number of seconds."""
    options = sys.modules.get("firebase_functions.options")
    if options is None:
        return None
    timeout = getattr(getattr(options, "_GLOBAL_OPTIONS", None), "timeout_sec", None)
    return timeout if type(timeout) is int else None


def declared_timeout(function: object) -> int | None:
    """The `timeout_sec` a firebase-functions function declares (its endpoint's
    `timeoutSeconds`: the decorator's own, else the global one when it was declared), when it
    is a number of seconds."""
    endpoint = getattr(function, "__firebase_endpoint__", None)
    timeout = getattr(endpoint, "timeoutSeconds", None)
    return timeout if type(timeout) is int else None


def platform_function_of(inner: Callable[..., Any]) -> object | None:
    """The firebase-functions function that wraps `inner` (a dedup entrance's wrapper, which
    the platform decorator above it wrapped with `functools.wraps`): an attribute of `inner`'s
    module whose `__wrapped__` chain reaches it; else, for a function declared inside another,
    the function whose `__wrapped__` is `inner` (or wraps one that is, up to four decorators),
    found through the garbage collector's referrers, once; None when there is none (no
    firebase-functions decorator)."""
    module = sys.modules.get(getattr(inner, "__module__", None) or "")
    if module is not None:
        named = getattr(module, getattr(inner, "__name__", ""), None)
        candidates = [named, *vars(module).values()]
        found: list[object] = [c for c in candidates if platform_wrapped(c) and _wraps(c, inner)]
        if found:
            return found[0]
    current: object = inner
    for _ in range(4):
        outer = _wrapper_of(current)
        if outer is None or platform_wrapped(outer):
            return outer
        current = outer
    return None


def _wrapper_of(inner: object) -> object | None:
    """The function `functools.wraps` made over `inner` (its `__dict__` holds `__wrapped__`)."""
    for holder in gc.get_referrers(inner):
        if isinstance(holder, dict) and holder.get("__wrapped__") is inner:
            for owner in gc.get_referrers(holder):
                if getattr(owner, "__dict__", None) is holder:
                    return cast(object, owner)
    return None


def function_timeout_of(inner: Callable[..., Any]) -> int | None:
    """The timeout the function served by `inner` declares: its firebase-functions decorator's
    `timeout_sec` (`platform_function_of`, `declared_timeout`), else the global one of
    `set_global_options` (`global_timeout_seconds`); None when neither is a number."""
    wrapping = platform_function_of(inner)
    found = declared_timeout(wrapping) if wrapping is not None else None
    return found if found is not None else global_timeout_seconds()


def _wraps(outer: object, inner: object) -> bool:
    """`inner` is `outer` or on its `__wrapped__` chain."""
    seen: set[int] = set()
    current: object = outer
    while current is not None and id(current) not in seen:
        if current is inner:
            return True
        seen.add(id(current))
        current = getattr(current, "__wrapped__", None)
    return False


def parse_firestore_event(raw: Any, event_type: str, document_pattern: str) -> Any:
    """firebase-functions' own parse of a raw Firestore CloudEvent (the handler's `Event`)."""
    from firebase_functions import firestore_fn
    from firebase_functions.private.path_pattern import PathPattern

    parsed: list[Any] = []
    firestore_fn._firestore_endpoint_handler(
        parsed.append, event_type, PathPattern(document_pattern), raw
    )
    return parsed[0]


def parse_pubsub_event(raw: Any) -> Any:
    """firebase-functions' own parse of a raw Pub/Sub CloudEvent (the handler's event)."""
    from firebase_functions import pubsub_fn

    parsed: list[Any] = []
    pubsub_fn._message_handler(parsed.append, raw)
    return parsed[0]


def on_the_platform(environ: Mapping[str, str]) -> bool:
    """True in a deployed instance (Cloud Run's `K_SERVICE`), False locally and in the Functions
    emulator (which sets `FUNCTIONS_EMULATOR=true`)."""
    return bool(environ.get("K_SERVICE")) and environ.get("FUNCTIONS_EMULATOR") != "true"


def platform_wrapped(function: object) -> bool:
    """True when a firebase-functions decorator (`firestore_fn.on_document_created`,
    `https_fn.on_request`, ...) returned `function`: it carries the SDK's endpoint."""
    return getattr(function, "__firebase_endpoint__", None) is not None
