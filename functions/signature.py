"""How functions-framework calls each function main.py exports: registered from its trigger.

functions-framework chooses how to call a function (its signature type) in this order: the type
registered for the target's name by its decorators `functions_framework.cloud_event` and
`functions_framework.http`, then `--signature-type`, then the `FUNCTION_SIGNATURE_TYPE`
variable, then `http` (functions-framework 3.10.2, `get_func_signature_type`; the same for its
ASGI server). main.py registers every function it serves (`register`), so

| the function's trigger | served as | whatever the flag or `FUNCTION_SIGNATURE_TYPE` say |
|---|---|---|
| an event (Firestore, Pub/Sub, Storage, Alerts...) | a CloudEvent function | yes |
| HTTP, callable, task queue, schedule | an HTTP function (the Flask request) | yes |

That is what lets Cloud Run functions serve the event functions: `gcloud run deploy
--function` reserves `FUNCTION_SIGNATURE_TYPE` and sets it itself, so `make deploy-run` sets
none (docs/deploy.md). On the other paths the platform's value is the same as the registered
one (`firebase deploy`, the Functions emulator, `make deploy-gcloud`'s env files).

A decorator registers the name of the function it decorates, and a function can be served under
another name (`indexPost` is `index_post`'s queue id; an alias): `register` hands it a stand-in
carrying the name served, and keeps none of what it returns (the firebase-functions function is
served itself).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import functions_framework

from functions.asgi import ASGI_ENDPOINT

Signature = Literal["cloudevent", "http"]
REGISTER: dict[Signature, Callable[[Callable[..., Any]], Any]] = {
    "cloudevent": functions_framework.cloud_event,
    "http": functions_framework.http,
}
"""functions-framework's decorator that registers each signature type."""


def signature_of(function: object) -> Signature | None:
    """`cloudevent` for a function declared with an event trigger, `http` for any other
    declared trigger (the firebase-functions endpoint, or an `asgi_function`'s); None for an
    object that declares none."""
    endpoint = getattr(function, "__firebase_endpoint__", None) or getattr(
        function, ASGI_ENDPOINT, None
    )
    if endpoint is None:
        return None
    return "cloudevent" if getattr(endpoint, "eventTrigger", None) is not None else "http"


def register(name: str, function: object) -> Signature | None:
    """Register `function`'s signature type (`signature_of`) with functions-framework under
    `name`, the target it is served as; what was registered (None: nothing)."""
    signature = signature_of(function)
    if signature is None:
        return None

    def stand_in(*_args: Any) -> None:
        raise NotImplementedError("registered for its name only, never called")

    stand_in.__name__ = stand_in.__qualname__ = name
    REGISTER[signature](stand_in)
    return signature
