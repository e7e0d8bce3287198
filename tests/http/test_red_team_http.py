"""The HTTP and callable entrances under attack, on the Firestore emulator: what a caller is
told is what happened, within the function's timeout.

Invariants proven here (docs/http.md):

* A callable's result or `HttpsError` is stored as firebase-functions sends it; details Flask
  can send never release a key after the effect: one effect per key, every replay the same
  answer. Details it cannot send end the key `failed`, never released.
* One time budget per request, across its wait rounds, replays and reads: a request answers
  within its function's timeout, whatever the store does.
* A completed response the record cannot hold whole is stored as its stub (status, size,
  sha256): a replay is 410 `response-not-stored` naming that status, never a failure's text.
* The first answer is the handler's own response, headers included; a replay carries the
  stored status, body, `Content-Type` and `Location`, never `Set-Cookie` or cache headers.
* "Retry with the same key" is said only when the key is free: a handler's failure whose
  release failed is 503 + `Retry-After`; one that was released is 500 and its retry runs,
  whatever text the handler raised (lone surrogates included).

Time is driven by `DedupConfig.budget_clock` where a test is about the budget, or checked as
what the client asked of each RPC (its deadline), never as a tight real-time race.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import flask
import grpc
import pytest
from firebase_functions import https_fn
from flask.testing import FlaskClient
from google.cloud import firestore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from werkzeug.test import EnvironBuilder

from dedup import DedupConfig, Deduplicator, Delivery, SuffixRegistry, TerminalError
from dedup.http import (
    REPLAYED_HEADER,
    IdempotentRequest,
    NotStored,
    StoredResponse,
    idempotent_callable,
    idempotent_http,
)
from dedup.http.idempotency import retryable_status
from dedup.kernel.transitions import MAX_RESULT_BYTES
from dedup.platform.firestore_values import value_size
from tests.dedup.grpc_faults import Fault, FaultInterceptor, FaultyClient, Plan, _InjectedError
from tests.http.support import problem

COLLECTION = "triggerEvents"
SETTINGS = settings(
    max_examples=20, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)


def client_of(view: Callable[[Any], Any]) -> FlaskClient:
    """A Flask test client serving `view` at `/` for POST."""
    app = flask.Flask(__name__)
    app.add_url_rule("/", "view", lambda: view(flask.request), methods=["POST"])
    return app.test_client()


def post(client: FlaskClient, key: str, body: Any = None) -> Any:
    headers = {"Content-Type": "application/json", "Idempotency-Key": key}
    return client.post("/", data=json.dumps(body if body is not None else {}), headers=headers)


def call(client: FlaskClient, key: str, **data: Any) -> Any:
    """A callable request as the client SDKs send it."""
    body = {"data": {"idempotencyKey": key, **data}}
    return client.post("/", data=json.dumps(body), headers={"Content-Type": "application/json"})


def new_key() -> str:
    return uuid.uuid4().hex


def config(**settings_: Any) -> DedupConfig:
    """A config as the HTTP kinds need it (reused keys refused, no key cache)."""
    return DedupConfig(on_payload_mismatch="raise", cache_size=0, **settings_)


class DrivenClock:
    """A budget clock (seconds) that stands still until the test moves it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


# --- 1. A callable's error, stored as firebase-functions sends it ---------------------------


def refunding_callable(suffix: str, effects: list[str]) -> tuple[FlaskClient, list[Any]]:
    """A callable (served as firebase-functions serves it) that refunds (appends to `effects`),
    then raises FAILED_PRECONDITION with the `details` the test puts in `raising[0]`."""
    raising: list[Any] = [None]

    @idempotent_callable(suffix, anonymous=True, registry=SuffixRegistry())
    def refund(request: https_fn.CallableRequest[Any], delivery: Delivery) -> Any:
        effects.append(delivery.key)
        raise https_fn.HttpsError(
            https_fn.FunctionsErrorCode.FAILED_PRECONDITION, "already refunded", raising[0]
        )

    return client_of(https_fn.on_call()(refund)), raising


def test_a_callable_error_with_details_flask_sends_refunds_once(
    firestore_client: firestore.Client,
) -> None:
    """The contract: a callable raising FAILED_PRECONDITION with a `Decimal` and a datetime in
    its details after its effect, called four times with one key: one effect, and all four
    answers the same 400 error, details as Flask encodes them (`"12.50"`, an HTTP date)."""
    effects: list[str] = []
    client, raising = refunding_callable("refund_decimal", effects)
    raising[0] = {
        "refunded": Decimal("12.50"),
        "at": dt.datetime(2026, 12, 7, 9, 30, tzinfo=dt.UTC),
    }
    key = new_key()
    answers = [call(client, key, order="o1") for _ in range(4)]
    assert len(effects) == 1
    assert {a.status_code for a in answers} == {400}
    assert len({a.get_data() for a in answers}) == 1, [a.get_data() for a in answers]
    error = answers[0].get_json()["error"]
    assert error["status"] == "FAILED_PRECONDITION"
    assert error["details"] == {"refunded": "12.50", "at": "Mon, 07 Dec 2026 09:30:00 GMT"}


json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()  # lone surrogates included
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.datetimes(timezones=st.just(dt.UTC))
    | st.dates()
    | st.uuids()
)
sendable_details = st.recursive(
    json_leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def test_any_details_flask_can_send_give_one_effect_and_the_same_answer(
    firestore_client: firestore.Client,
) -> None:
    """For any details Flask's JSON provider can send (numbers, `NaN`, lone surrogates,
    `Decimal`, dates, UUIDs, nested), three calls with one key run the effect once and get
    the same answer, byte for byte."""
    effects: list[str] = []
    client, raising = refunding_callable("refund_any", effects)

    @SETTINGS
    @given(details=sendable_details)
    def property_(details: Any) -> None:
        raising[0] = details
        effects.clear()
        key = new_key()
        answers = [call(client, key) for _ in range(3)]
        assert len(effects) == 1
        assert {a.status_code for a in answers} == {400}
        assert len({a.get_data() for a in answers}) == 1, [a.get_data() for a in answers]

    property_()


def test_details_flask_cannot_send_end_the_key_failed_never_released(
    firestore_client: firestore.Client,
) -> None:
    """Details no JSON provider can send (an arbitrary object) after the effect: the key ends
    `failed`, every call is answered `internal` `request-failed`, the effect runs once."""
    effects: list[str] = []
    client, raising = refunding_callable("refund_object", effects)
    raising[0] = {"refund": object()}
    key = new_key()
    answers = [call(client, key) for _ in range(3)]
    assert len(effects) == 1
    assert {a.status_code for a in answers} == {500}
    assert {a.get_json()["error"]["details"]["reason"] for a in answers} == {"request-failed"}
    record = firestore_client.collection(COLLECTION).document(f"{key}-refund_object").get()
    assert record.get("state") == "failed"


def test_a_callable_result_flask_sends_is_replayed_as_sent(
    firestore_client: firestore.Client,
) -> None:
    """A result with a `Decimal` (Flask sends it as a string) is stored, not refused: the
    first call and its replays get the same result; one effect."""
    effects: list[str] = []

    @idempotent_callable("result_decimal", anonymous=True, registry=SuffixRegistry())
    def refund(request: https_fn.CallableRequest[Any], delivery: Delivery) -> Any:
        effects.append(delivery.key)
        return {"refunded": Decimal("12.50"), "id": uuid.UUID(int=7)}

    client, key = client_of(https_fn.on_call()(refund)), new_key()
    answers = [call(client, key) for _ in range(3)]
    assert len(effects) == 1
    assert {a.status_code for a in answers} == {200}
    assert len({a.get_data() for a in answers}) == 1
    assert answers[0].get_json()["result"]["refunded"] == "12.50"


# --- 2. One budget per request, across wait rounds -----------------------------------------


class LeaseHeldLines(logging.Handler):
    """Counts the delivery lines whose outcome is `lease_held` and lets a test wait for them."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.changed = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "outcome", None) == "lease_held":
            with self.changed:
                self.count += 1
                self.changed.notify_all()

    def wait_for(self, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.count >= count, timeout=30), self.count


@pytest.fixture
def lease_held_lines() -> Iterator[LeaseHeldLines]:
    lines = LeaseHeldLines()
    logger = logging.getLogger("dedup")
    logger.addHandler(lines)
    yield lines
    logger.removeHandler(lines)


def test_a_waiting_copy_answers_within_the_function_timeout(
    firestore_client: firestore.Client, lease_held_lines: LeaseHeldLines
) -> None:
    """The contract: with `wait_seconds`, a copy that waits for the first request and then runs
    the handler itself (the first failed) has only what is left of its own request's budget,
    not a new one per wait round. Driven clock: the first request takes 7 s of a 10 s timeout
    and fails; the copy, which arrived with it, is told it has at most 3 s and, using all but
    1.5 s of it, answers before its 10 s are up (a fresh budget per round told it 9 s)."""
    timeout, clock = 10, DrivenClock()
    dedup = Deduplicator(
        config(
            function_timeout_seconds=timeout,
            lease_seconds=30,
            rpc_timeout_seconds=5,
            budget_clock=clock,
        ),
        client=firestore_client,
    )
    told: list[float] = []
    first_inside = threading.Event()

    @idempotent_http(
        "wait_budget", anonymous=True, wait_seconds=8, deduplicator=dedup, registry=SuffixRegistry()
    )
    def handler(call_: IdempotentRequest) -> flask.Response:
        if not told:  # the first request
            told.append(call_.delivery.time_left() or 0.0)
            first_inside.set()
            lease_held_lines.wait_for(1)  # the copy was refused once: it is waiting
            clock.advance(7)
            lease_held_lines.wait_for(2)  # and refused again by a round started after 7 s
            raise RuntimeError("the first request fails after 7 s")
        left = call_.delivery.time_left() or 0.0
        told.append(left)
        clock.advance(max(0.0, left - 1.5))  # the handler uses the time it is told it has
        return flask.Response("{}", 201, content_type="application/json")

    client, key = client_of(handler), new_key()
    first: list[Any] = []
    flight = threading.Thread(target=lambda: first.append(post(client, key)))
    flight.start()
    assert first_inside.wait(30)
    arrived = clock()
    copy = post(client_of(handler), key)
    flight.join()
    assert first[0].status_code == 500
    assert copy.status_code == 201, copy.get_data(as_text=True)
    assert len(told) == 2
    assert told[1] <= timeout - 7, told
    assert clock() - arrived <= timeout, (clock() - arrived, told)


# --- 3. Every read bounded by the request's budget -----------------------------------------


class _TimedOutStream(_InjectedError):
    """A streaming call that ended at its deadline: iterating it raises DEADLINE_EXCEEDED."""

    def __iter__(self) -> _TimedOutStream:
        return self

    def __next__(self) -> Any:
        raise self


class HangingReads(FaultInterceptor, grpc.UnaryStreamClientInterceptor):
    """A `FaultInterceptor` that also sees document reads (streaming calls): from read number
    `hang_from` on, a read waits for its whole deadline and fails DEADLINE_EXCEEDED, as a store
    that hangs. Notes every call's method, send time and deadline."""

    def __init__(self, plan: Plan) -> None:
        super().__init__(plan)
        self.hang_from: int | None = None
        self.sent: list[tuple[str, float, float | None]] = []

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        self._note(details)
        return super().intercept_unary_unary(continuation, details, request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        method = self._note(details)
        with self._lock:
            self.calls[method] += 1
            number = self.calls[method]
        if self.hang_from is not None and number >= self.hang_from:
            time.sleep(details.timeout if details.timeout is not None else 60.0)
            return _TimedOutStream(grpc.StatusCode.DEADLINE_EXCEEDED, "injected: read hung")
        return continuation(details, request)

    def _note(self, details: Any) -> str:
        method = str(details.method).rsplit("/", 1)[-1]
        self.sent.append((method, time.monotonic(), details.timeout))
        return method


def test_a_replay_read_is_bounded_by_the_request_budget(firestore_host: str) -> None:
    """The contract: under a 2 s timeout (RPCs allowed 10 s), a retry of a failed request
    whose store hangs after the claim's read is answered within the 2 s: the read of how the
    first request ended asks for no more than what is left (a fresh read asked for 10 s and
    answered after 10 s)."""
    timeout = 2
    faults = HangingReads(lambda method, n: Fault.PASS)
    dedup = Deduplicator(
        config(function_timeout_seconds=timeout, lease_seconds=13, rpc_timeout_seconds=10),
        client=FaultyClient(faults),
    )

    @idempotent_http("read_budget", anonymous=True, deduplicator=dedup, registry=SuffixRegistry())
    def refuses(call_: IdempotentRequest) -> flask.Response:
        raise TerminalError("the account is closed")

    client, key = client_of(refuses), new_key()
    assert post(client, key).status_code == 500
    faults.hang_from = faults.calls["BatchGetDocuments"] + 2  # the claim's read passes
    faults.sent.clear()
    started = time.monotonic()
    retried = post(client, key)
    took = time.monotonic() - started
    assert retried.status_code in (500, 503), retried.get_data(as_text=True)
    past = [
        (method, round(at - started, 2), deadline)
        for method, at, deadline in faults.sent
        if deadline is None or at + deadline > started + timeout + 0.5
    ]
    assert past == [], past
    assert took < timeout + 2, took  # wide: the bound above is what is checked


# --- 4. A response the record cannot hold whole: its stub ----------------------------------


def test_a_response_under_the_cap_that_the_record_cannot_hold_replays_as_too_large(
    firestore_client: firestore.Client,
) -> None:
    """The contract: a lease-mode handler with 200 KB of notes and 420 KB of steps answers 201
    with 500,000 bytes (under the 512 KiB cap, over what the record has left): the first
    caller gets it whole, every replay is 410 `response-not-stored` with status 201, the size
    and the sha256 (never the text of a request that failed); one run."""
    runs: list[str] = []
    body = b"r" * 500_000

    @idempotent_http("stub_room", anonymous=True, registry=SuffixRegistry())
    def heavy(call_: IdempotentRequest) -> flask.Response:
        runs.append(call_.key)
        call_.delivery.note(context="n" * 200_000)
        for part in range(7):  # 420 KB of steps, 60 KB each (a step holds at most 64 KiB)
            call_.delivery.step(f"prepare-{part}", lambda: "s" * 60_000)
        return flask.Response(
            body, 201, content_type="application/octet-stream", headers={"Location": "/blobs/1"}
        )

    client, key = client_of(heavy), new_key()
    first = post(client, key)
    assert (first.status_code, first.get_data()) == (201, body)
    for _ in range(2):
        replay = post(client, key)
        assert replay.status_code == 410
        assert replay.headers[REPLAYED_HEADER] == "true"
        found = problem(replay)
        assert found["type"].endswith("response-not-stored")
        assert (found["originalStatus"], found["bytes"]) == (201, len(body))
        assert found["sha256"] == hashlib.sha256(body).hexdigest()
        assert found["location"] == "/blobs/1"  # where to fetch it instead
        assert "failed" not in found["detail"]
    assert runs == [key]


# --- 5. The first answer is the handler's own ----------------------------------------------

OWN_HEADERS = {
    "Cache-Control": "private, max-age=60",
    "ETag": '"v1"',
    "X-Order-Trace": "abc",
}


def test_the_first_answer_carries_the_handlers_headers_and_replays_do_not(
    firestore_client: firestore.Client,
) -> None:
    """The contract: a handler answering 201 with `Cache-Control`, `Set-Cookie`, `ETag` and a
    header of its own: the first caller gets every one of them; a replay gets the stored
    status, body, `Content-Type` and `Location`, and none of those (docs/http.md says why)."""

    @idempotent_http("own_headers", anonymous=True, registry=SuffixRegistry())
    def created(call_: IdempotentRequest) -> flask.Response:
        response = flask.Response("{}", 201, content_type="application/json")
        response.headers.update(OWN_HEADERS)
        response.headers["Location"] = "/orders/1"
        response.set_cookie("session", "s1", httponly=True)
        return response

    client, key = client_of(created), new_key()
    first = post(client, key)
    assert first.status_code == 201
    for name, value in OWN_HEADERS.items():
        assert first.headers.get(name) == value, name
    assert "session=s1" in first.headers.get("Set-Cookie", "")
    replay = post(client, key)
    assert (replay.status_code, replay.get_data()) == (201, first.get_data())
    assert replay.headers["Content-Type"] == "application/json"
    assert replay.headers["Location"] == "/orders/1"
    for name in (*OWN_HEADERS, "Set-Cookie"):
        assert name not in replay.headers, name


TOKEN = st.from_regex(r"[A-Za-z0-9._-]{1,16}", fullmatch=True)
HEADERS = {  # each header with values a plain Flask view sends unchanged
    "Content-Type": st.sampled_from(["application/json", "text/plain; charset=utf-8", "a/b"]),
    "Location": TOKEN.map(lambda t: f"/orders/{t}"),
    "Set-Cookie": TOKEN.map(lambda t: f"session={t}; HttpOnly"),
    "ETag": TOKEN.map(lambda t: f'"{t}"'),
    "Cache-Control": st.sampled_from(["no-store", "private, max-age=60", "public"]),
    "X-A": TOKEN,
}


def test_any_response_first_answered_as_sent_then_replayed_as_stored(
    firestore_client: firestore.Client,
) -> None:
    """For any status below 500 that is stored (408, 425 and 429 release the key, as 5xx do),
    body and headers: the first answer is the handler's response (status, body, every header it
    set); each replay has the same status, body, `Content-Type` and `Location`, marked
    replayed; the handler runs once per key."""
    runs: list[str] = []
    answering: list[tuple[int, bytes, dict[str, str]]] = []

    @idempotent_http("any_response", anonymous=True, registry=SuffixRegistry())
    def answer(call_: IdempotentRequest) -> flask.Response:
        runs.append(call_.key)
        status, body, headers = answering[-1]
        response = flask.Response(body, status)
        for name, value in headers.items():
            response.headers[name] = value
        return response

    client = client_of(answer)

    @SETTINGS
    @given(
        # 204 and 304 have no body; 408, 425 and 429 release the key, stored never
        status=st.integers(200, 499).filter(
            lambda s: s not in (204, 304) and not retryable_status(s)
        ),
        body=st.binary(max_size=2000),
        headers=st.sets(st.sampled_from(sorted(HEADERS))).flatmap(
            lambda names: st.fixed_dictionaries({name: HEADERS[name] for name in names})
        ),
    )
    def property_(status: int, body: bytes, headers: dict[str, str]) -> None:
        answering.append((status, body, headers))
        runs.clear()
        key = new_key()
        first = post(client, key)
        assert (first.status_code, first.get_data()) == (status, body)
        for name, value in headers.items():
            assert first.headers.get(name) == value, name
        for _ in range(2):
            replay = post(client, key)
            assert (replay.status_code, replay.get_data()) == (status, body)
            assert replay.headers.get("Location") == first.headers.get("Location")
            assert replay.headers.get("Content-Type") == first.headers.get("Content-Type")
            assert replay.headers[REPLAYED_HEADER] == "true"
            for name in ("Set-Cookie", "ETag", "Cache-Control", "X-A"):
                assert name not in replay.headers, name
        assert runs == [key]

    property_()


# --- 6. "Retry with the same key" only when it is free -------------------------------------


def test_any_text_a_handler_raises_leaves_the_key_free_when_the_answer_says_so(
    firestore_client: firestore.Client,
) -> None:
    """For any text a handler raises (lone surrogates included), the answer that says "retry
    with the same key" is true: the record was released, and the retry runs the handler."""
    runs: list[str] = []
    raising: list[str] = []

    @idempotent_http("any_text", anonymous=True, registry=SuffixRegistry())
    def fails_once(call_: IdempotentRequest) -> flask.Response:
        runs.append(call_.key)
        if len(runs) == 1:
            raise RuntimeError(raising[-1])
        return flask.Response("{}", 201, content_type="application/json")

    client = client_of(fails_once)

    @SETTINGS
    @given(text=st.text(max_size=3000) | st.just("\ud800") | st.just("é\udfff" * 500))
    def property_(text: str) -> None:
        raising.append(text)
        runs.clear()
        key = new_key()
        failed = post(client, key)
        assert failed.status_code == 500
        assert problem(failed)["type"].endswith("handler-failed")
        record = firestore_client.collection(COLLECTION).document(f"{key}-any_text").get()
        assert record.get("leaseStartedAt") is None  # released
        assert post(client, key).status_code == 201
        assert len(runs) == 2

    property_()


def test_a_failure_whose_release_is_refused_is_503_not_retry_now(
    firestore_client: firestore.Client,
) -> None:
    """A handler raises and Firestore refuses the write that would release its key (commit 2,
    INVALID_ARGUMENT): the lease still holds the key, so the answer is 503 + `Retry-After`, not
    500 "retry it with the same key" (whose retry would get 409 until the lease ends)."""
    faults = FaultInterceptor(
        lambda method, n: Fault.INVALID if (method, n) == ("Commit", 2) else Fault.PASS
    )
    dedup = Deduplicator(config(lease_seconds=30), client=FaultyClient(faults))

    @idempotent_http("unreleased", anonymous=True, deduplicator=dedup, registry=SuffixRegistry())
    def fails(call_: IdempotentRequest) -> flask.Response:
        raise RuntimeError("downstream failed")

    client, key = client_of(fails), new_key()
    failed = post(client, key)
    assert failed.status_code == 503, failed.get_data(as_text=True)
    assert failed.headers["Retry-After"]
    assert problem(failed)["type"].endswith("store-unavailable")
    assert post(client, key).status_code == 409  # as the answer said: held until the lease ends


# --- Further holes: answers a Flask view gives that are not return values ------------------


def test_an_abort_after_the_effect_is_a_stored_answer_not_a_release(
    firestore_client: firestore.Client,
) -> None:
    """A handler that answers with `flask.abort(409)` after its effect (as a plain Flask view
    would) is answered 409 and that answer is stored: its retries replay it and the effect runs
    once (an exception releasing the key would run it on every retry)."""
    effects: list[str] = []

    @idempotent_http("aborts", anonymous=True, registry=SuffixRegistry())
    def refund(call_: IdempotentRequest) -> flask.Response:
        effects.append(call_.key)
        flask.abort(409, description="the order was already shipped")

    client, key = client_of(refund), new_key()
    answers = [post(client, key) for _ in range(3)]
    assert [a.status_code for a in answers] == [409, 409, 409]
    assert len({a.get_data() for a in answers}) == 1
    assert REPLAYED_HEADER not in answers[0].headers
    assert answers[1].headers[REPLAYED_HEADER] == "true"
    assert effects == [key]


def test_a_file_answer_is_stored_and_replayed(firestore_client: firestore.Client) -> None:
    """A handler answering with `flask.send_file` (a response in direct passthrough mode) is
    read whole, answered and stored: its replay is the same bytes, not a terminal failure."""
    content = b"%PDF-1.7 receipt"

    @idempotent_http("file_answer", anonymous=True, registry=SuffixRegistry())
    def receipt(call_: IdempotentRequest) -> flask.Response:
        return flask.send_file(io.BytesIO(content), mimetype="application/pdf")

    client, key = client_of(receipt), new_key()
    first = post(client, key)
    replay = post(client, key)
    assert (first.status_code, first.get_data()) == (200, content)
    assert (replay.status_code, replay.get_data()) == (200, content)
    assert replay.headers["Content-Type"] == "application/pdf"


class EndlessBody(io.RawIOBase):
    """A request body without a length that never ends, as a chunked upload can be; counts
    the bytes read and refuses to give more than `most` (a reader that would take it all)."""

    def __init__(self, most: int) -> None:
        self.most, self.given = most, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        assert self.given <= self.most, f"{self.given} bytes read from an endless body"
        size = len(buffer)
        buffer[:size] = b"x" * size
        self.given += size
        return size


def test_a_body_without_a_length_is_read_no_further_than_the_limit(
    firestore_client: firestore.Client,
) -> None:
    """A chunked body (no `Content-Length`, the server terminating the stream) larger than
    `max_body_bytes` is refused 413 after reading at most about that much, before any record:
    it is never read whole into memory."""
    ran: list[str] = []

    @idempotent_http("endless", anonymous=True, max_body_bytes=1000, registry=SuffixRegistry())
    def never(call_: IdempotentRequest) -> flask.Response:
        ran.append(call_.key)
        return flask.Response("{}", 201)

    body = EndlessBody(most=1_000_000)
    headers = {"Content-Type": "application/json", "Idempotency-Key": new_key()}
    environ = EnvironBuilder(method="POST", headers=list(headers.items())).get_environ()
    environ.pop("CONTENT_LENGTH", None)
    environ.update({"wsgi.input": body, "wsgi.input_terminated": True})
    with flask.Flask(__name__).request_context(environ):
        answer = never(flask.request)
    assert answer.status_code == 413, answer.get_data(as_text=True)
    assert problem(answer)["type"].endswith("body-too-large")
    assert body.given < 100_000
    assert ran == []


@SETTINGS
@given(
    status=st.integers(200, 499),
    size=st.integers(0, 600_000),
    room=st.none() | st.integers(0, 700_000),
    location=st.none() | st.text(max_size=300),
)
def test_a_stored_response_is_whole_when_it_fits_else_its_stub(
    status: int, size: int, room: int | None, location: str | None
) -> None:
    """Unit: `StoredResponse.to_result(room)` keeps the whole response when it fits the cap and
    the room, else a stub naming its status, size and sha256 (with its `Location` when that
    fits too); a replay reads back the one or the other, never nothing."""
    body = bytes(size)
    response = StoredResponse(status, body, "application/octet-stream", location)
    stored = response.to_result(room)
    limit = MAX_RESULT_BYTES if room is None else min(MAX_RESULT_BYTES, room)
    back = StoredResponse.from_result(stored)
    if not stored.get("tooLarge"):
        assert value_size(stored) <= limit
        assert back == response
        return
    assert isinstance(back, NotStored)
    assert (back.status, back.size) == (status, size)
    assert back.sha256 == hashlib.sha256(body).hexdigest()
    if "location" in stored:
        assert value_size(stored) <= limit
        assert back.location == location


@pytest.mark.parametrize("status", [408, 425, 429])
def test_a_retry_later_answer_is_not_stored(
    firestore_client: firestore.Client, status: int
) -> None:
    """A handler answering 429 (or 408, 425: "send it again later") is answered so, with its
    own `Retry-After`, and nothing is stored: the retry it asks for runs the handler (a stored
    429 would be replayed to every retry, and the request could never succeed with its key)."""
    runs: list[str] = []

    @idempotent_http(f"later_{status}", anonymous=True, registry=SuffixRegistry())
    def busy_once(call_: IdempotentRequest) -> flask.Response:
        runs.append(call_.key)
        if len(runs) == 1:
            return flask.Response("slow down", status, headers={"Retry-After": "3"})
        return flask.Response("{}", 201, content_type="application/json")

    client, key = client_of(busy_once), new_key()
    first = post(client, key)
    assert (first.status_code, first.headers["Retry-After"]) == (status, "3")
    retried = post(client, key)
    assert retried.status_code == 201
    assert REPLAYED_HEADER not in retried.headers
    assert len(runs) == 2


def test_a_callable_resource_exhausted_is_not_stored(firestore_client: firestore.Client) -> None:
    """A callable raising `resource-exhausted` (429) releases its key like `internal`: the
    retry runs and its result is the one stored."""
    runs: list[str] = []

    @idempotent_callable("exhausted", anonymous=True, registry=SuffixRegistry())
    def quota(request: https_fn.CallableRequest[Any], delivery: Delivery) -> Any:
        runs.append(delivery.key)
        if len(runs) == 1:
            raise https_fn.HttpsError(https_fn.FunctionsErrorCode.RESOURCE_EXHAUSTED, "quota")
        return {"ok": len(runs)}

    client, key = client_of(https_fn.on_call()(quota)), new_key()
    assert call(client, key).status_code == 429
    answers = [call(client, key) for _ in range(2)]
    assert [a.get_json() for a in answers] == [{"result": {"ok": 2}}] * 2
    assert len(runs) == 2
