"""`strict_callable`: answer a malformed callable request `invalid-argument`, before
firebase-functions turns it into a 500 `INTERNAL` that clients retry.

firebase-functions (0.6.0, `https_fn._on_call_handler`) reads a callable's body with Flask's
`request.json` and `json.loads`, inside a `try` that answers every exception that is not an
`HttpsError` with `{"error": {"status": "INTERNAL"}}` and status 500. So an empty body, `{`,
bytes after the JSON, 100,000 levels of nesting, a 5,000-digit integer or a top-level number
(`"data" in 5`) all got a retryable 500 before the function's code ran, and `NaN`, `Infinity`,
`1e999` and lone surrogates reached it as data.

`strict_callable` sits above `https_fn.on_call()` and reads the body first, with
`dedup.platform.strict_json` (its limits and its wording). A POST with a JSON content type (what
firebase-functions accepts; it refuses the rest with `invalid-argument` itself) whose body is
not strict JSON, or not an object with exactly the member `data`, is answered 400 with the
callable protocol's error:

    {"error": {"status": "INVALID_ARGUMENT", "message": "<what to fix>",
               "details": {"reason": "malformed-json"}}}

The message never names an exception type nor repeats the body. Everything else is passed to
the function unchanged (firebase-functions parses it again: a small body costs twice a
microsecond-scale parse).

    create_order_callable = strict_callable(
        https_fn.on_call()(idempotent_callable("create_order_callable")(handler))
    )
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from typing import Any, cast

import flask

from dedup.platform.strict_json import InvalidJSON, loads

REASON = "malformed-json"
"""`details.reason` of the refusal."""

logger = logging.getLogger("dedup.http")


def envelope_problem(request: flask.Request) -> str | None:
    """What makes a callable request malformed (a sentence for the caller), or None when
    firebase-functions may read it (or will refuse it with `invalid-argument` itself)."""
    content_type = (request.headers.get("Content-Type") or "").split(";", 1)[0].strip()
    if request.method != "POST" or content_type.lower() != "application/json":
        return None
    try:
        envelope = loads(request.get_data(cache=True), what="the request body")
    except InvalidJSON as exc:
        return exc.detail
    if not isinstance(envelope, dict) or set(envelope) != {"data"}:
        return 'the request body must be a JSON object {"data": ...} and nothing else'
    return None


def refusal(detail: str) -> flask.Response:
    """The callable protocol's `invalid-argument` error (HTTP 400) with `detail`."""
    error = {"status": "INVALID_ARGUMENT", "message": detail, "details": {"reason": REASON}}
    return flask.Response(json.dumps({"error": error}), 400, content_type="application/json")


def strict_callable[F: Callable[..., Any]](function: F) -> F:
    """Wrap an `https_fn.on_call()` function so a malformed body is refused (module docstring).

    Put it outermost; the firebase-functions endpoint (`__firebase_endpoint__`) is kept.
    """
    name = getattr(function, "__name__", "callable")

    @functools.wraps(function)
    def checked(request: flask.Request) -> Any:
        problem = envelope_problem(request)
        if problem is not None:
            logger.warning("%s: refused (400): %s", name, problem)
            return refusal(problem)
        return function(request)

    return cast(F, checked)
