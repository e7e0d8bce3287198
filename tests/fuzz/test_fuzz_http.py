"""Seeded fuzzing of the request entry points: `create_order`, `create_order_callable`,
`receive_line_webhook` and `indexPost`, served in-process on the emulators.

Each campaign spoils a fresh valid request (a new key, event id or task name per example) with
one to three mutations: headers dropped or set to odd values (the key, the token, the
signature, the task name, the content type); bytes cut, flipped, extended or replaced; a JSON
member set to a raw token that strict JSON refuses or that tests the text (`NaN`,
`Infinity`, `1e999`, 5,000 digits, lone surrogates, nesting from 65 to 100,000 levels, any
JSON value). The LINE body is signed again after its mutations, so they reach the parser; a
mutation of the signature itself is kept. For every mutated request:

* no 5xx (the store, Pub/Sub and the search service are up: nothing is retryable by nature);
* no exception type in the answer, and no 200 bytes of the request echoed by a refusal;
* a refusal (4xx) leaves no dedup record and no effect (no order, no publish, no index
  request), except the documented stored answer of a well-formed but invalid order;
* every `CONTROL_EVERY` requests a fresh valid request succeeds and takes effect exactly once;
* at the end, no record is `in_progress` or `dead`.

`FUZZ_HTTP_EXAMPLES` (default 200) sets the mutated requests per function, `FUZZ_SEED`
(default 2026) the seed: the same requests on every run with the same pair. Figures go to
`.cache/fuzz/<function>.json`.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import functions_framework
import pytest
from flask.testing import FlaskClient
from google.cloud import firestore
from google.cloud.pubsub_v1 import SubscriberClient
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import functions.receive_line_webhook as line_module
from demo.events import HttpEvent
from demo.pubsub import ensure_topic
from demo.receiver import Receiver
from demo.tasks import task_dispatch
from functions.index_post import FUNCTION_ID, search_index_url
from functions.receive_line_webhook import signature
from tests.conftest import PROJECT, RECEIVER_URL
from tests.functions.conftest import MAIN
from tests.fuzz.test_fuzz_boundary import Stats, stuck_records
from tests.http.support import AUTH_ENV, LINE_SECRET, User, line_body, sign_up

EXAMPLES = int(os.environ.get("FUZZ_HTTP_EXAMPLES", "200"))
SEED = int(os.environ.get("FUZZ_SEED", "2026"))
CONTROL_EVERY = 10
ECHO_BYTES = 200
EXCEPTION_NAME = re.compile(r"\b[A-Z][A-Za-z]+(?:Error|Exception)\b")
SEARCH_PATH = "/fuzz-search"

RAW_TOKENS = [
    "NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" + "0" * 5000, "9" * 101,
    '"\\ud800"', '"x\\udfff y"', '"\\ude00\\ud83d"', '{"\\ud800": 1}', "[" * 65 + "]" * 65,
    "[" * 100_000 + "]" * 100_000, '{"a":' * 70 + "1" + "}" * 70, "null", "true", "0", "-1",
    "1.5", "101", '""', '" "', '"zqecho-' + "y" * 300 + '"', "[]", "{}", '"\\u0000"',
]  # fmt: skip
"""JSON members are set to these raw texts (strict JSON refuses many; the rest test values)."""
HEADER_TEXT = [
    "", " ", "null", "0", '"quoted"', "a b", "\u00e6\u0097\u00a5", "zqecho-" + "x" * 300,
    "application/json", "text/plain", "application/json; charset=utf-16", "Bearer ",
    "Bearer x.y.z", "task-1", "%%%", "k" * 256,
]  # fmt: skip
JSON_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
    st.text(max_size=12),
)  # fmt: skip
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=5,
)


@dataclass(frozen=True)
class Labelled:
    """A mutation and what it did, for the statistics and failure messages."""

    label: str
    apply: Callable[[HttpEvent], HttpEvent]


@dataclass
class Target:
    """An entry point under fuzz."""

    name: str
    headers: list[str]
    """The headers worth spoiling."""
    members: list[str]
    """Where a raw JSON text may go: dotted paths into the body."""
    fresh: Callable[[], HttpEvent]
    """A new valid request (fresh key, event id or task name)."""
    effects: Callable[[], int]
    ok: tuple[int, ...]
    """The statuses of a valid request."""
    stored_refusal: Callable[[Any], bool] = lambda response: False
    """True for a 4xx that is a handler's answer, stored with a record by design."""
    finish: Callable[[HttpEvent, list[Labelled]], HttpEvent] = lambda event, chain: event
    """Applied after the mutations (the LINE target signs the body again)."""


def placeholder_body(body: bytes, member: str, raw: str) -> bytes:
    """`body` with the member at dotted `member` set to the raw JSON text `raw`."""
    value: Any = json.loads(body)
    marker = f"@@{uuid.uuid4().hex}@@"
    node = value
    *parents, last = member.split(".")
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if isinstance(node, list):
        node[int(last)] = marker
    else:
        node[last] = marker
    return json.dumps(value).replace(f'"{marker}"', raw).encode()


def mutations(target: Target) -> st.SearchStrategy[list[Labelled]]:
    @st.composite
    def header(draw: st.DrawFn) -> Labelled:
        name = draw(st.sampled_from(target.headers))
        if draw(st.booleans()):
            return Labelled(
                f"drop {name}",
                lambda e: HttpEvent(
                    e.id, {k: v for k, v in e.headers.items() if k.lower() != name.lower()}, e.body
                ),
            )
        value = draw(
            st.sampled_from(HEADER_TEXT)
            | st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=30)
        )
        return Labelled(
            f"set {name}", lambda e: HttpEvent(e.id, {**e.headers, name: value}, e.body)
        )

    @st.composite
    def raw_bytes(draw: st.DrawFn) -> Labelled:
        kind = draw(st.sampled_from(["cut", "flip", "append", "replace"]))
        where = draw(st.floats(0, 1))
        if kind == "replace":
            data = draw(st.binary(max_size=64))
            return Labelled("replace body", lambda e: HttpEvent(e.id, e.headers, data))

        def apply(e: HttpEvent) -> HttpEvent:
            at = int(where * len(e.body))
            if kind == "cut":
                return HttpEvent(e.id, e.headers, e.body[:at])
            if kind == "append":
                return HttpEvent(e.id, e.headers, e.body + b" \x00garbage")
            flipped = bytearray(e.body)
            if flipped:  # an earlier cut may have left nothing to flip
                flipped[min(at, len(flipped) - 1)] ^= 0xFF
            return HttpEvent(e.id, e.headers, bytes(flipped))

        return Labelled(f"{kind} body", apply)

    @st.composite
    def member(draw: st.DrawFn) -> Labelled:
        path = draw(st.sampled_from(target.members))
        if draw(st.integers(0, 3)) == 0:
            raw = json.dumps(draw(JSON_VALUES))
        else:
            raw = draw(st.sampled_from(RAW_TOKENS))
        label = f"{path} = {raw[:12]}"

        def apply(e: HttpEvent) -> HttpEvent:
            try:
                return HttpEvent(e.id, e.headers, placeholder_body(e.body, path, raw))
            except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError):
                return e  # an earlier mutation broke the body: nothing to set

        return Labelled(label, apply)

    one = st.one_of(header(), raw_bytes(), member(), member())
    return st.lists(one, min_size=1, max_size=3)


def echoes(text: str, event: HttpEvent) -> bool:
    """True when the answer repeats 200 bytes of the request's body or headers."""
    sources = [event.body.decode("utf-8", "replace"), *event.headers.values()]
    for source in sources:
        if len(source) < ECHO_BYTES:
            continue
        for start in (0, (len(source) - ECHO_BYTES) // 2, len(source) - ECHO_BYTES):
            if source[start : start + ECHO_BYTES] in text:
                return True
    return False


def count_records(db: firestore.Client) -> int:
    return len(list(db.collection("triggerEvents").list_documents()))


# --- The targets ---------------------------------------------------------------------------


def served(target: str) -> FlaskClient:
    app = functions_framework.create_app(target=target, source=MAIN, signature_type="http")
    return app.test_client()


@pytest.fixture
def user(firestore_host: str) -> User:
    host = os.environ.get(AUTH_ENV)
    if not host:
        pytest.fail(f"{AUTH_ENV} is not set: run with `make test` (the Auth emulator)")
    return sign_up(host)


@pytest.fixture
def line_publishes(firestore_host: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The event keys `receive_line_webhook` published (to the Pub/Sub emulator for real)."""
    monkeypatch.setenv("LINE_CHANNEL_SECRET", LINE_SECRET)
    name = f"fuzz-line-{uuid.uuid4().hex[:8]}"
    ensure_topic(PROJECT, "webhooks", subscription=name)
    real = line_module._publisher()
    calls: list[str] = []

    class Counting:
        def publish(self, topic: str, data: bytes, **attributes: str) -> Any:
            future = real.publish(topic, data, **attributes)
            calls.append(attributes.get("eventKey", ""))
            return future

    monkeypatch.setattr(line_module, "_publisher", lambda: Counting())
    yield calls
    SubscriberClient().delete_subscription(
        subscription=SubscriberClient().subscription_path(PROJECT, name)
    )


def order_target(db: firestore.Client, user: User) -> Target:
    def fresh() -> HttpEvent:
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": str(uuid.uuid4()),
            **user.bearer,
        }
        return HttpEvent("order", headers, b'{"item": "coffee", "quantity": 1}')

    return Target(
        "create_order",
        ["Content-Type", "Idempotency-Key", "Authorization"],
        ["item", "quantity", "extra", "extra.deep"],
        fresh,
        lambda: len(list(db.collection("orders").list_documents())),
        (201,),
        stored_refusal=lambda r: (
            r.get_json(silent=True, force=True) is not None
            and str(r.get_json(force=True).get("type", "")).endswith("invalid-order")
        ),
    )


def callable_target(db: firestore.Client, user: User) -> Target:
    def fresh() -> HttpEvent:
        data = {"item": "coffee", "quantity": 1, "idempotencyKey": str(uuid.uuid4())}
        headers = {"Content-Type": "application/json", **user.bearer}
        return HttpEvent("call", headers, json.dumps({"data": data}).encode())

    def handler_answer(response: Any) -> bool:  # the handler's own invalid-argument: stored
        error = (response.get_json(silent=True, force=True) or {}).get("error") or {}
        return error.get("status") == "INVALID_ARGUMENT" and "details" not in error

    return Target(
        "create_order_callable",
        ["Content-Type", "Authorization"],
        ["data", "data.item", "data.quantity", "data.idempotencyKey", "data.x", "extra"],
        fresh,
        lambda: len(list(db.collection("orders").list_documents())),
        (200,),
        stored_refusal=handler_answer,
    )


def line_target(publishes: list[str]) -> Target:
    def fresh() -> HttpEvent:
        body = line_body(f"01F{uuid.uuid4().hex[:20].upper()}")
        return HttpEvent("line", {"Content-Type": "application/json"}, body)

    def sign(event: HttpEvent, chain: list[Labelled]) -> HttpEvent:
        if any("X-Line-Signature" in m.label for m in chain):
            return event  # a spoiled signature stays spoiled (its own mutation)
        headers = {**event.headers, "X-Line-Signature": signature(event.body, LINE_SECRET)}
        return HttpEvent(event.id, headers, event.body)

    def fresh_signed() -> HttpEvent:
        return sign(fresh(), [])

    return Target(
        "receive_line_webhook",
        ["Content-Type", "X-Line-Signature"],
        [
            "events",
            "events.0",
            "events.0.webhookEventId",
            "events.0.message.text",
            "events.0.deliveryContext",
            "destination",
        ],
        fresh_signed,
        lambda: len(publishes),
        (200,),
        finish=sign,
    )


def index_target(db: firestore.Client, receiver: Receiver) -> Target:
    post = f"fuzz-{uuid.uuid4().hex[:8]}"
    db.collection("posts").document(post).set({"authorId": "ann", "title": "fuzz"})

    def fresh() -> HttpEvent:
        return task_dispatch(f"fuzz-task-{uuid.uuid4().hex}", {"postId": post})

    return Target(
        FUNCTION_ID,
        ["Content-Type", "X-CloudTasks-TaskName"],
        ["data", "data.postId", "data.x", "extra"],
        fresh,
        lambda: len(receiver.applied(SEARCH_PATH)),
        (200,),
    )


TARGETS = ["create_order", "create_order_callable", "receive_line_webhook", FUNCTION_ID]


@pytest.mark.parametrize("function", TARGETS)
def test_fuzzed_requests_get_no_5xx_and_leave_no_trace(
    function: str,
    firestore_client: firestore.Client,
    receiver: Receiver,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No mutated request gets a 5xx or leaves a record or an effect when refused; answers
    name no exception and echo nothing; valid requests interleaved succeed exactly once."""
    db = firestore_client
    if function == "receive_line_webhook":
        target = line_target(request.getfixturevalue("line_publishes"))
    elif function == FUNCTION_ID:
        monkeypatch.setenv("SEARCH_INDEX_URL", f"{RECEIVER_URL}{SEARCH_PATH}")
        search_index_url.cache_clear()
        target = index_target(db, receiver)
    else:
        user = request.getfixturevalue("user")
        target = (order_target if function == "create_order" else callable_target)(db, user)
    client = served(function)
    stats = Stats()

    def send(event: HttpEvent) -> Any:
        return client.post("/", data=event.body, headers=dict(event.headers))

    @seed(SEED)
    @settings(
        max_examples=EXAMPLES,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(mutations(target))
    def one_request(chain: list[Labelled]) -> None:
        bad = target.fresh()
        for mutation in chain:
            bad = mutation.apply(bad)
        bad = target.finish(bad, chain)
        labels = " + ".join(m.label for m in chain)
        records, effects = count_records(db), target.effects()
        response = send(bad)
        status, text = response.status_code, response.get_data(as_text=True)
        stats.requests += 1
        stats.statuses[status] += 1
        assert status < 500, f"{labels}: {status} {text[:300]}"
        assert not EXCEPTION_NAME.search(text), f"{labels}: {text[:300]}"
        if status >= 400:  # a refusal (an accepted order's answer holds its item, by design)
            assert not echoes(text, bad), f"{labels}: the refusal echoes the request"
            stats.refused_by.update(m.label.split(" = ")[0] for m in chain)
            assert target.effects() == effects, f"{labels}: refused but took effect"
            if not target.stored_refusal(response):
                assert count_records(db) == records, f"{labels}: refused but left a record"
        if stats.requests % CONTROL_EVERY == 0:
            stats.controls += 1
            before = target.effects()
            control = target.fresh()
            assert send(control).status_code in target.ok, f"control after {labels}"
            assert target.effects() == before + 1, f"control after {labels}"
            assert send(control).status_code in target.ok, f"control replay after {labels}"
            assert target.effects() == before + 1, f"control replay after {labels}"

    try:
        one_request()
    finally:
        stats.write(function, examples=EXAMPLES, seed=SEED)
    assert stuck_records(db) == [], "records a client or the platform would retry until it gives up"
