"""Requests that are not Cloud Tasks dispatches are refused before any dedup record is read or
written; a dispatch whose Firestore is unreachable answers 503 (Cloud Tasks retries it)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from firebase_functions.https_fn import CallableRequest, HttpsError

from dedup import DedupConfig, Deduplicator, Delivery, SuffixRegistry
from dedup.errors import InvalidSuffix
from dedup.tasks import task_dispatch, task_once
from demo.events import HttpEvent
from demo.receiver import Receiver
from demo.tasks import task_dispatch as dispatch_request
from tests.dedup.grpc_faults import Fault, faulty_client
from tests.tasks.conftest import SEARCH_PATH, TaskFunction

WRITES = {"Commit", "BeginTransaction", "Rollback"}

GOOD = dispatch_request("task-good", {"postId": "p1"})


def request(
    *,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    drop: str | None = None,
    body: bytes | None = None,
) -> tuple[str, HttpEvent]:
    merged = {**GOOD.headers, **(headers or {})}
    if drop:
        merged.pop(drop)
    return method, HttpEvent("bad", merged, GOOD.body if body is None else body)


BAD_REQUESTS = {
    "no task name": (request(drop="X-CloudTasks-TaskName"), 400),
    "empty task name": (request(headers={"X-CloudTasks-TaskName": " "}), 400),
    "body not JSON": (request(body=b"{not json"), 400),
    "body JSON but not an object": (request(body=b'"data"'), 400),
    "object without data": (request(body=b'{"postId": "p1"}'), 400),
    "data plus other keys": (request(body=b'{"data": {"postId": "p1"}, "x": 1}'), 400),
    "empty body": (request(body=b""), 400),
    "text content type": (request(headers={"Content-Type": "text/plain"}), 415),
    "no content type": (request(drop="Content-Type"), 415),
    "GET": (request(method="GET"), 405),
    "2 MB body": (request(body=b'{"data": "' + b"x" * 2_000_000 + b'"}'), 413),
    "100,000 levels": (request(body=b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"), 400),
    "5,000-digit integer": (request(body=b'{"data": 1' + b"0" * 5000 + b"}"), 400),
    "NaN": (request(body=b'{"data": {"postId": NaN}}'), 400),
    "1e999": (request(body=b'{"data": 1e999}'), 400),
    "not UTF-8": (request(body=b'{"data": "\xff"}'), 400),
    "trailing bytes": (request(body=b'{"data": {"postId": "p1"}} x'), 400),
    "long content type": (request(headers={"Content-Type": "text/" + "x" * 100_000}), 415),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_bad_requests_are_refused_before_any_record(
    case: str,
    index_post: TaskFunction,
    receiver: Receiver,
    records: Callable[[], list[dict[str, Any]]],
) -> None:
    """Each malformed request gets its 4xx; no record, no effect; the next good task runs."""
    (method, bad), status = BAD_REQUESTS[case]
    response = index_post.client.open("/", method=method, data=bad.body, headers=dict(bad.headers))
    assert response.status_code == status
    assert "error" in response.get_json()
    assert records() == []
    assert receiver.applied(SEARCH_PATH) == []


def test_emulator_health_probe_is_logged_at_info(
    index_post: TaskFunction, caplog: pytest.LogCaptureFixture
) -> None:
    """The Functions emulator's `GET /__/health` at worker start is a 405 logged at INFO, as
    for the event functions; any other refused request, a GET / included, stays a WARNING."""
    caplog.set_level(logging.INFO)
    for path, level in [("/__/health", logging.INFO), ("/", logging.WARNING)]:
        caplog.clear()
        assert index_post.client.get(path).status_code == 405
        [refusal] = [r for r in caplog.records if getattr(r, "outcome", None) == "refused"]
        assert refusal.levelno == level, path


def test_failing_firestore_answers_503(firestore_host: str) -> None:
    """StoreUnavailable becomes 503 `unavailable` (Cloud Tasks retries with more backoff), and
    the handler never runs."""
    failing = faulty_client(lambda method, _n: Fault.DEADLINE if method in WRITES else Fault.PASS)
    dedup = Deduplicator(DedupConfig(rpc_timeout_seconds=2), client=failing)
    ran: list[str] = []

    @task_once("tasks_unavailable", deduplicator=dedup, registry=SuffixRegistry())
    def handler(request: CallableRequest[Any], delivery: Delivery) -> None:
        ran.append(delivery.key)

    flask_request = _flask_request(GOOD)
    with pytest.raises(HttpsError) as raised:
        handler(CallableRequest(raw_request=flask_request, data={"postId": "p1"}))
    assert raised.value._http_error_code.status == 503
    assert ran == []


def _flask_request(event: HttpEvent) -> Any:
    import flask

    app = flask.Flask(__name__)
    with app.test_request_context("/", method="POST", data=event.body, headers=event.headers):
        return flask.request._get_current_object()  # type: ignore[attr-defined]


def test_task_headers_are_read_case_insensitively() -> None:
    """The task name is the event id; the platform's counters are read for the log line."""
    flask_request = _flask_request(dispatch_request("t1", {}, retry_count=2, execution_count=1))
    dispatch = task_dispatch(flask_request.headers)
    assert (dispatch.task_name, dispatch.retry_count, dispatch.execution_count) == ("t1", "2", "1")


def test_suffix_is_checked_at_decoration() -> None:
    """A suffix with '-' is refused when the module is imported, as with trigger_once."""
    with pytest.raises(InvalidSuffix):
        task_once("index-post", registry=SuffixRegistry())
