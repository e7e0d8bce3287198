"""The HTTP functions the HTTP tests serve, with crash points (never deployed).

    PYTHONPATH=. functions-framework --source tests/http/served.py --signature-type http ...

Without `CRASH_AT` they behave as in main.py (and `tests/http/endpoints.py`). With it (see
`tests/faults/crash_functions.py`, which this module imports for the event functions' points,
among them the LINE ingress's dedup steps), the HTTP deduplicator's steps and `in_handler`
(before `create_order`'s transactional write, before a test endpoint's work) are crash points
too.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import functions.create_order
import tests.http.endpoints
from dedup.http import http_deduplicator
from tests.faults.crash_functions import crash_point


def _before(owner: Any, attribute: str, point: str) -> None:
    original = getattr(owner, attribute)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        crash_point(point)
        return original(*args, **kwargs)

    setattr(owner, attribute, wrapper)


if os.environ.get("CRASH_AT"):
    http_deduplicator().on_step(lambda step, key: crash_point(step.value))
    _before(functions.create_order, "place_order", "in_handler")
    _before(tests.http.endpoints, "count_run", "in_handler")

from main import create_order, create_order_callable, receive_line_webhook  # noqa: E402
from tests.http.endpoints import bad_result, echo, echo_wait  # noqa: E402

__all__ = [
    "bad_result",
    "create_order",
    "create_order_callable",
    "echo",
    "echo_wait",
    "receive_line_webhook",
]
