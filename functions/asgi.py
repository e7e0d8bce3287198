"""The template's name for `dedup.aio.asgi_function`: how an `async def` function exported from
`main.py` declares its trigger for the deploy (docs/async.md).

The wrapper lives in the library (`dedup.asgi`, re-exported by `dedup.aio`), so that a project
using the installed library declares its async functions the same way; this module re-exports it
unchanged, for the template's own code (`functions.signature`, `tools/exports.py`) and for
`main.py`s written against `from functions.asgi import asgi_function`. One implementation:
`ASGI_ENDPOINT` here is the library's, so an endpoint set by either import is found by both.
"""

from dedup.asgi import ASGI_ENDPOINT, DEPLOYABLE_TRIGGERS, asgi_function

__all__ = ["ASGI_ENDPOINT", "DEPLOYABLE_TRIGGERS", "asgi_function"]
