"""The HTTP boundary of task-queue functions: refuse what is not a Cloud Tasks dispatch, before
any Firestore record is touched.

Cloud Tasks always sends a POST with `Content-Type: application/json`, a `{"data": ...}` body
(what `firebase_admin.functions` enqueues) and the `X-CloudTasks-TaskName` header. Anything
else comes from a misconfigured or hostile caller: it gets a 4xx status and one WARNING log
line saying what was wrong (never the body; the emulator's start-up probe `GET /__/health` at
INFO), no dedup record is read or written, and the instance goes on serving.
firebase-functions alone would answer a body that is not JSON with a 500, which Cloud Tasks
(and any caller) takes for a failure worth retrying. Checked in order:

| problem                                              | status |
|------------------------------------------------------|--------|
| method other than POST                               | 405    |
| body larger than a task can be (1 MiB)               | 413    |
| content type other than `application/json`           | 415    |
| body not JSON, or not an object with exactly `data`  | 400    |
| body deeper or with longer integers than `dedup.platform.strict_json` allows, or `NaN` | 400    |
| no (or an empty) `X-CloudTasks-TaskName` header      | 400    |

Cloud Tasks retries a 4xx too: these answers are for callers that are not Cloud Tasks, or for
tasks `dedup.outbox.enqueue_task` cannot create (it writes `allow_nan=False` JSON, and a value
nested too deep or too large fails there first). A dispatch that passes but cannot succeed
(bad `data`, a missing post) is the handler's `TerminalError`: 200, recorded `failed`.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from typing import Any, cast

import flask

from dedup.kernel.delivery import mark_entered
from dedup.platform import strict_json
from dedup.tasks import TASK_NAME_HEADER
from dedup.telemetry import log_delivery
from functions.boundary import is_health_probe

MAX_TASK_BODY = 1024 * 1024
"""Cloud Tasks' limit on a task (its body is smaller still)."""


def dispatch_problem(request: flask.Request) -> tuple[int, str] | None:
    """What makes `request` not a Cloud Tasks dispatch (status, reason), or None."""
    if request.method != "POST":
        return 405, f"method {request.method} is not POST"
    if (request.content_length or 0) > MAX_TASK_BODY:
        return 413, f"the body is larger than {MAX_TASK_BODY} bytes"
    if request.mimetype != "application/json":
        return 415, "the content type is not application/json"
    body = request.get_data(cache=True)
    if len(body) > MAX_TASK_BODY:
        return 413, f"the body is larger than {MAX_TASK_BODY} bytes"
    try:  # RFC 8259 within dedup.platform.strict_json's limits (text kept as sent)
        parsed = strict_json.loads(body, lone_surrogates=True)
    except strict_json.InvalidJSON as malformed:
        return 400, malformed.detail
    if not isinstance(parsed, dict) or set(parsed) != {"data"}:
        return 400, 'the body is not a task: expected a JSON object {"data": ...}'
    if not (request.headers.get(TASK_NAME_HEADER) or "").strip():
        return 400, f"no {TASK_NAME_HEADER} header: only Cloud Tasks may call this function"
    return None


def _refusal(name: str, status: int, why: str) -> flask.Response:
    level = logging.INFO if is_health_probe(status) else logging.WARNING
    log_delivery(level, f"refused ({status}): {name}: {why}", outcome="refused")
    return flask.Response(
        json.dumps({"error": why}), status=status, content_type="application/json"
    )


def validated_task[F: Callable[..., Any]](function: F) -> F:
    """Wrap a firebase-functions task-queue function so non-dispatches are refused (see module).

    Put it outermost, above `tasks_fn.on_task_dispatched`, whose endpoint it keeps.
    """
    endpoint: Any = getattr(function, "__firebase_endpoint__", None)
    if endpoint is None or getattr(endpoint, "taskQueueTrigger", None) is None:
        raise TypeError(f"{function!r} is not a firebase-functions task-queue function")
    name = getattr(function, "__name__", "function")

    @functools.wraps(function)
    def checked(request: flask.Request) -> Any:
        problem = dispatch_problem(request)
        if problem is not None:
            return _refusal(name, *problem)
        mark_entered()  # failures from here on are the function's own (500)
        return function(request)

    return cast(F, checked)
