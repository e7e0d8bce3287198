"""Exactly-once effects for `async def` handlers: `AsyncDeduplicator` and the async deliveries.

`dedup.trigger_once` wraps an `async def handler(event, delivery)` into an async CloudEvent
function (serve it with `functions_framework.aio.cloud_event` and `functions-framework
--asgi`); call `AsyncDeduplicator.run` for the explicit form. `asgi_function` declares such a
function's trigger for a deploy (`dedup.asgi`, kept apart: declaring a function loads none of
the async runtime). See docs/async.md.
"""

from dedup.aio.delivery import (
    AsyncDelivery,
    AsyncHandler,
    AsyncTransactionDelivery,
    AsyncWriteOnlyDelivery,
)
from dedup.aio.front_door import AsyncDeduplicator, default_async_deduplicator
from dedup.asgi import ASGI_ENDPOINT, asgi_function

__all__ = [
    "ASGI_ENDPOINT",
    "AsyncDeduplicator",
    "AsyncDelivery",
    "AsyncHandler",
    "AsyncTransactionDelivery",
    "AsyncWriteOnlyDelivery",
    "asgi_function",
    "default_async_deduplicator",
]
