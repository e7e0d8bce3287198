"""`asgi_function`: how an `async def` function declares its trigger for a deploy.

firebase-functions' decorators take sync handlers only, and `firebase deploy` serves functions
with the sync (Flask) server, so an async function is deployed with `gcloud functions deploy`
(`make deploy-gcloud` in the template), served by functions-framework's ASGI server. It
declares its trigger with the SDK's own decorator, handed to `asgi_function`:

    from dedup.aio import asgi_function

    @asgi_function(firestore_fn.on_document_written(document="posts/{postId}"))
    @functions_framework.aio.cloud_event
    @trigger_once("countAsync", mode=Mode.TRANSACTION)
    async def count_async(event: CloudEvent, delivery: AsyncTransactionDelivery) -> None: ...

Invariants. The SDK builds the endpoint (trigger, document pattern, database, topic, and the
runtime shape of `set_global_options` or the decorator's own options) exactly as for a sync
function, on a stand-in that is never called; the async function is returned unchanged except
that it carries that endpoint under `ASGI_ENDPOINT`, never under `__firebase_endpoint__`, so
neither firebase-tools nor the Functions emulator ever takes it for theirs. A trigger outside
`DEPLOYABLE_TRIGGERS` (callable, task-queue, scheduled: they need firebase-tools or its SDK's
sync wrappers) is refused with a `ConfigError` when the module is imported, never at deploy.

It imports nothing beyond `dedup.errors`: the trigger decorator comes from firebase-functions (a
dependency of the library), and serving the function needs functions-framework 3.10 or later
in the functions' requirements (its `aio` module and ASGI server), which the deploy installs,
not this module. The template's `functions.asgi` re-exports these names (docs/async.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from dedup.errors import ConfigError

__all__ = ["ASGI_ENDPOINT", "DEPLOYABLE_TRIGGERS", "asgi_function"]

ASGI_ENDPOINT = "__asgi_endpoint__"
"""Attribute holding the SDK endpoint of an async function (not `__firebase_endpoint__`, which
firebase-tools would deploy with its sync server)."""
DEPLOYABLE_TRIGGERS = ("eventTrigger", "httpsTrigger")
"""The endpoint trigger kinds an async function may declare."""

Function = TypeVar("Function", bound=Callable[..., Any])


def asgi_function(trigger: Callable[[Callable[..., Any]], Any]) -> Callable[[Function], Function]:
    """Declare the trigger (a firebase-functions trigger decorator, called with its options)
    of the async function it decorates, which it returns unchanged but for `ASGI_ENDPOINT`;
    `ConfigError` for something that is no firebase-functions trigger decorator, or for a
    trigger an async function cannot be deployed with (callable, task queue, schedule)."""

    def declare(function: Function) -> Function:
        def stand_in(*_args: Any) -> None:
            raise NotImplementedError("the endpoint's stand-in is never called")

        stand_in.__name__ = stand_in.__qualname__ = function.__name__
        endpoint = getattr(trigger(stand_in), "__firebase_endpoint__", None)
        if endpoint is None:
            raise ConfigError(
                f"asgi_function({function.__name__}): pass a firebase-functions trigger "
                "decorator, e.g. firestore_fn.on_document_written(document=...)"
            )
        kinds = [k for k in vars(endpoint) if k.endswith("Trigger") and getattr(endpoint, k)]
        if not set(kinds) <= set(DEPLOYABLE_TRIGGERS):
            raise ConfigError(
                f"{function.__name__}: an async function cannot have a {', '.join(kinds)}; "
                "declare a Firestore or Pub/Sub event, or https_fn.on_request()"
            )
        setattr(function, ASGI_ENDPOINT, endpoint)
        return function

    return declare
