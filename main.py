"""Entry point of the functions, for `firebase deploy`, `gcloud functions deploy` and the emulator.

Each name below is a deployed function (its entry point for gcloud). The event functions are
firebase-functions handlers that take the raw CloudEvent; requests that are not well-formed
events for the function are refused with a 4xx before any work (`functions.boundary`). The
HTTP functions (`create_order`, `create_order_callable`, `receive_line_webhook`, and the task
and schedule functions) take the Flask request and refuse malformed requests themselves, with
problem+json (`dedup.http`, docs/http.md). Which of the two functions-framework serves is
registered with it when a function is first accessed (`functions.signature`), so neither
`--signature-type` nor `FUNCTION_SIGNATURE_TYPE` can change it.

The functions' runtime shape (memory, CPU, concurrency, instances, timeout) is declared once,
by `set_global_options` in `functions/__init__.py`: both deploy paths read it from the manifest
the SDK builds from this file (`tools/deploy`, docs/deploy.md). The package runs it before
any function module is declared, whichever is imported first (their decorators copy it).

`index_post` is a task-queue function (an HTTP function Cloud Tasks calls, signature `http`),
deployed as `indexPost`: its name is its queue's id, which may not hold "_". Both names refer
to one function, so the manifest lists it once (docs/tasks.md).

An instance imports only the function it serves: `FUNCTIONS` names each function's module, and
a function is imported on first access (a module `__getattr__`, PEP 562), so the instance
serving `FUNCTION_TARGET` loads that module at start-up, runs its start-up check, and never
loads a sibling's. `__all__` and `dir()` still list every function: the deploy tool and the
Functions emulator (firebase-functions' manifest, which reads every function of the module) and
functions-framework's `--target` (an attribute lookup) find each of them.
"""

import importlib
import os
from typing import Any

import functions_framework

from dedup.logs import configure_logging
from functions.boundary import install_boundary
from functions.observability import configure_telemetry
from functions.runtime import check_function_settings, refuse_unsafe_settings
from functions.signature import register as register_signature

FUNCTIONS: dict[str, str] = {
    "alert_new_fatal_issue": "functions.alert_new_fatal_issue",
    "create_order": "functions.create_order",
    "create_order_callable": "functions.create_order",
    "daily_digest": "functions.daily_digest",
    "forward_webhook": "functions.forward_webhook",
    "fulfil_order": "functions.fulfil_order",
    "indexPost": "functions.index_post",
    "receive_line_webhook": "functions.receive_line_webhook",
    "register_upload": "functions.register_upload",
    "relay_outbox": "functions.relay_outbox",
    "send_post_notification": "functions.send_post_notification",
    "sync_published_count": "functions.sync_published_count",
}
"""Each deployed function's name -> the module that defines it (imported on first access)."""

ALIASES = {"index_post": "indexPost"}
"""Other names of a function: `index_post` is indexPost's Python name (not in `__all__`)."""

__all__ = list(FUNCTIONS)


def __getattr__(name: str) -> Any:
    """The function `name` (or its alias), its module imported and the function kept here on
    first access; AttributeError for any other name."""
    exported = ALIASES.get(name, name)
    if exported not in FUNCTIONS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    function = getattr(importlib.import_module(FUNCTIONS[exported]), exported)
    register_signature(name, function)  # served as its trigger says, whatever the variable
    globals()[name] = function
    return function


def __dir__() -> list[str]:
    """Every name of the module, the functions not yet imported included."""
    return sorted({*globals(), *FUNCTIONS, *ALIASES})


configure_logging()
configure_telemetry()  # DEDUP_OTEL=1: spans to Cloud Trace, metrics to Cloud Monitoring
install_boundary(functions_framework.errorhandler)
if (served := os.environ.get("FUNCTION_TARGET", "")) in FUNCTIONS.keys() | ALIASES.keys():
    __getattr__(served)  # the served function's module, which declares its start-up check
refuse_unsafe_settings(globals())  # on the platform only: lease vs timeout, DEDUP_* names
check_function_settings()  # the served function's own settings (WEBHOOK_ROUTES, NOTIFY_URL...)
