"""How an `async def` function exported from `main.py` declares its trigger for the deploy.

firebase-functions' decorators take sync handlers only, and `firebase deploy` serves functions
with the sync (Flask) server, so an async function is deployed by `make deploy-gcloud` alone,
served by functions-framework's ASGI server. It declares its trigger with the SDK's own
decorator, handed to `asgi_function`:

    @asgi_function(firestore_fn.on_document_written(document="posts/{postId}"))
    @functions_framework.aio.cloud_event
    @trigger_once("countAsync", mode=Mode.TRANSACTION)
    async def count_async(event: CloudEvent, delivery: AsyncTransactionDelivery) -> None: ...

The SDK builds the endpoint (trigger, document pattern, database, topic, and the runtime shape
of `set_global_options` or the decorator's own options) exactly as for a sync function, on a
stand-in; the async function only carries it (`ASGI_ENDPOINT`), so neither firebase-tools nor
the Functions emulator ever sees it as theirs. `tools/deploy` deploys it like any other
function, plus `FUNCTION_USE_ASGI=true` in its environment (docs/async.md).

Triggers: Firestore and Pub/Sub events (`firestore_fn.on_document_*`,
`pubsub_fn.on_message_published`) and plain HTTP (`https_fn.on_request`). Callable, task-queue
and scheduled triggers are refused here, at import: they need firebase-tools or its SDK's sync
wrappers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from dedup.errors import ConfigError

ASGI_ENDPOINT = "__asgi_endpoint__"
"""Attribute holding the SDK endpoint of an async function (not `__firebase_endpoint__`, which
firebase-tools would deploy with its sync server)."""
DEPLOYABLE_TRIGGERS = ("eventTrigger", "httpsTrigger")
"""The endpoint trigger kinds an async function may declare."""

Function = TypeVar("Function", bound=Callable[..., Any])


def asgi_function(trigger: Callable[[Callable[..., Any]], Any]) -> Callable[[Function], Function]:
    """Declare the trigger (a firebase-functions trigger decorator, called with its options)
    of the async function it decorates; `ConfigError` for a trigger `make deploy-gcloud` cannot
    give an async function."""

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
