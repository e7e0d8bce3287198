"""The six trigger kinds of the conformance matrix, each driven through its public entrance.

An `Entrance` is one instance's decorated function of one kind: `deliver(event_id, payload)`
hands it one delivery as the platform would, and normalises the answer to what the platform
does next:

| kind       | entrance                         | "retry" (else "stop")               |
|------------|----------------------------------|-------------------------------------|
| `event`    | `trigger_once` on a `def`        | raises                              |
| `async`    | `trigger_once` on an `async def` | raises                              |
| `http`     | `dedup.http.idempotent_http`     | 409, 503, a 500 "handler-failed"    |
| `callable` | `dedup.http.idempotent_callable` | ABORTED, UNAVAILABLE, INTERNAL...   |
| `task`     | `dedup.tasks.task_once`          | raises                              |
| `run`      | `Deduplicator.run`               | raises                              |

A handler that dies (`Crash`, not an `Exception`: it escapes every handler of the library,
as a killed process would leave its record) is answered "crash".
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import flask
from cloudevents.http import CloudEvent
from firebase_functions import https_fn

from dedup import Deduplicator, Mode, SuffixRegistry, trigger_once
from dedup.aio import AsyncDeduplicator
from dedup.http import IdempotentRequest, idempotent_callable, idempotent_http
from dedup.tasks import TASK_NAME_HEADER, task_once

SUFFIX = "matrix"
KINDS = ("event", "async", "http", "callable", "task", "run")
"""Every trigger kind."""
ASYNC_KINDS = frozenset({"async"})
"""Kinds whose handler is an `async def` (run by an `AsyncDeduplicator`)."""
TIMED_KINDS = frozenset({"event", "async", "run"})
"""Kinds whose deliveries carry an event time (the only ones an age limit applies to)."""

STOP, RETRY, CRASH = "stop", "retry", "crash"

_app = flask.Flask(__name__)


class Crash(BaseException):
    """The handler's process dies here: nothing of the library handles it."""


Act = Callable[[Any], Any]
"""What the handler does with its delivery (sync kinds)."""
AsyncAct = Callable[[Any], Any]
"""What the handler does with its delivery, awaited (async kind)."""


@dataclass
class Entrance:
    """One instance's function of one kind; `deliver` returns stop, retry or crash."""

    kind: str
    function: Any

    def deliver(self, event_id: str, payload: dict[str, Any], event_time: datetime) -> str:
        """One delivery of `event_id` with `payload` (sync kinds; the async one runs its own
        event loop)."""
        if self.kind in ASYNC_KINDS:
            return asyncio.run(self.deliver_async(event_id, payload, event_time))
        try:
            return _DELIVER[self.kind](self.function, event_id, payload, event_time)
        except Crash:
            return CRASH

    async def deliver_async(
        self, event_id: str, payload: dict[str, Any], event_time: datetime
    ) -> str:
        """One delivery, awaited (async kind)."""
        try:
            await self.function(_cloud_event(event_id, payload, event_time))
        except Crash:
            return CRASH
        except Exception:
            return RETRY
        return STOP


def entrance(
    kind: str,
    mode: Mode,
    deduplicator: Deduplicator | AsyncDeduplicator,
    act: Act,
) -> Entrance:
    """`act` decorated by the public entrance of `kind` on `deduplicator` (its own registry:
    every instance registers the suffix once)."""
    registry = SuffixRegistry()
    if kind == "event" or kind == "async":
        if kind == "async":

            async def async_handler(event: Any, delivery: Any) -> None:
                await act(delivery)

            return Entrance(
                kind,
                trigger_once(SUFFIX, mode=mode, deduplicator=deduplicator, registry=registry)(
                    async_handler
                ),
            )

        def handler(event: Any, delivery: Any) -> None:
            act(delivery)

        function = trigger_once(SUFFIX, mode=mode, deduplicator=deduplicator, registry=registry)
        return Entrance(kind, function(handler))
    assert isinstance(deduplicator, Deduplicator)
    if kind == "http":

        def http_handler(call: IdempotentRequest) -> Any:
            act(call.delivery)
            return {"ok": True}

        return Entrance(
            kind,
            idempotent_http(
                SUFFIX, mode=mode, anonymous=True, deduplicator=deduplicator, registry=registry
            )(http_handler),
        )
    if kind == "callable":

        def callable_handler(request: Any, delivery: Any) -> Any:
            act(delivery)
            return {"ok": True}

        return Entrance(
            kind,
            idempotent_callable(
                SUFFIX, mode=mode, anonymous=True, deduplicator=deduplicator, registry=registry
            )(callable_handler),
        )
    if kind == "task":

        def task_handler(request: Any, delivery: Any) -> None:
            act(delivery)

        return Entrance(
            kind,
            task_once(SUFFIX, mode=mode, deduplicator=deduplicator, registry=registry)(
                task_handler
            ),
        )

    def run(event_id: str, payload: dict[str, Any], event_time: datetime) -> Any:
        return deduplicator.run(
            event_id,
            SUFFIX,
            act,
            mode=mode,
            payload=json.dumps(payload, sort_keys=True),
            event_time=event_time,
        )

    return Entrance(kind, run)


def record_event_id(kind: str, event_id: str) -> str:
    """The dedup event id a delivery of `event_id` is recorded under (the same for every kind:
    anonymous HTTP and callable keys are the key itself)."""
    return event_id


def _cloud_event(event_id: str, payload: dict[str, Any], event_time: datetime) -> CloudEvent:
    return CloudEvent(
        {
            "id": event_id,
            "source": "//matrix.test/source",
            "type": "test.matrix.v1",
            "time": event_time.isoformat(),
        },
        payload,
    )


def _event(function: Any, event_id: str, payload: dict[str, Any], event_time: datetime) -> str:
    try:
        function(_cloud_event(event_id, payload, event_time))
    except Crash:
        raise
    except Exception:
        return RETRY
    return STOP


def _run(function: Any, event_id: str, payload: dict[str, Any], event_time: datetime) -> str:
    return _event(lambda _: function(event_id, payload, event_time), event_id, payload, event_time)


def _http(function: Any, event_id: str, payload: dict[str, Any], event_time: datetime) -> str:
    headers = {"Idempotency-Key": event_id}
    with _app.test_request_context("/orders", method="POST", json=payload, headers=headers):
        response = function(flask.request)
    status = response.status_code
    if status in (409, 503):
        return RETRY
    if status >= 500:
        problem = response.get_json(silent=True) or {}
        slug = str(problem.get("type", "")).rsplit(":", 1)[-1]
        return RETRY if slug in ("", "handler-failed") else STOP
    return STOP


_RETRIED_CODES = {
    https_fn.FunctionsErrorCode.ABORTED,
    https_fn.FunctionsErrorCode.UNAVAILABLE,
    https_fn.FunctionsErrorCode.INTERNAL,
    https_fn.FunctionsErrorCode.RESOURCE_EXHAUSTED,
}


def _callable(function: Any, event_id: str, payload: dict[str, Any], event_time: datetime) -> str:
    with _app.test_request_context("/", method="POST", json={"data": payload}):
        request = https_fn.CallableRequest(
            raw_request=flask.request, data={"idempotencyKey": event_id, **payload}
        )
        try:
            function(request)
        except https_fn.HttpsError as error:
            return RETRY if error.code in _RETRIED_CODES else STOP
    return STOP


def _task(function: Any, event_id: str, payload: dict[str, Any], event_time: datetime) -> str:
    headers = {TASK_NAME_HEADER: event_id}
    with _app.test_request_context("/", method="POST", json={"data": payload}, headers=headers):
        request = https_fn.CallableRequest(raw_request=flask.request, data=payload)
        try:
            function(request)
        except Crash:
            raise
        except Exception:
            return RETRY
    return STOP


_DELIVER: dict[str, Callable[[Any, str, dict[str, Any], datetime], str]] = {
    "event": _event,
    "http": _http,
    "callable": _callable,
    "task": _task,
    "run": _run,
}
