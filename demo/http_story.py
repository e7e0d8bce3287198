"""The HTTP half of the story: clients retrying POSTs, and LINE redelivering webhooks, against
the functions the Functions emulator serves (`create_order`, `create_order_callable`,
`receive_line_webhook`), with real ID tokens from the Auth emulator.

* **Orders**: a signed-in user sends one order `COPIES` times at once with one
  `Idempotency-Key` (a conflict, 409 or ABORTED, is retried), then again after it completed;
  then the same key with another body (422, or FAILED_PRECONDITION); then another user sends
  the same key. Exactly one order per caller must exist, and every success must carry it.
* **LINE**: signed batches, one after the other, each delivered `COPIES` times at once
  (redeliveries marked as LINE marks them) and redelivered until accepted; each event must be
  published to `webhooks` once and, delivered from there to `forward_webhook` at least once,
  reach the LINE route once. A batch with a forged signature must get 401 and leave no record
  and no message.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import requests
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.pubsub_v1 import SubscriberClient
from google.pubsub_v1.types import PubsubMessage

from demo.clients import (
    User,
    function_url,
    line_body,
    line_event_id,
    line_headers,
    new_key,
    order_headers,
    sign_up,
)
from demo.platform import COPIES, DeliveryLog
from demo.pubsub import ensure_topic, pull_all

ORDER = {"item": "coffee", "quantity": 2}
OTHER_ORDER = {"item": "tea", "quantity": 1}
LINE_AUDIT = "demo-line-audit"
"""A subscription to `webhooks` that sees every message the LINE ingress publishes."""
LINE_BATCHES = 3
EVENTS_PER_BATCH = 2
CLIENT_TIMEOUT_SECONDS = 30.0
"""A client gives up on an answer after this long and sends the request again: the Functions
emulator starts a Python worker per concurrent request on a random port, and a worker that
loses the race for its port never answers (firebase-tools' `startPython`). At most `COPIES`
requests run at once, so each function needs at most that many workers."""
MAX_TRIES = 30
BACKOFF_SECONDS = 0.3
NO_ANSWER = 0
"""The status logged for a request that got no answer (the client sends it again)."""


@dataclass
class Call:
    """Every answer one logical request got, in order (the last one ends it)."""

    statuses: list[int] = field(default_factory=list)
    body: Any = None


@dataclass
class Outcome:
    """What a scene did, and what it found: the row's numbers and its own checks."""

    log: DeliveryLog
    effects: int
    expected: int
    detail: str
    problems: list[str]


def _send(
    post: Callable[[], requests.Response], log: DeliveryLog, done: set[int], *, events: int = 1
) -> Call:
    """Send one request, and again (same key) while it gets no answer or a status not in `done`
    (409: the first request still runs); every try is logged as a delivery of each of the
    `events` the request carries (a LINE batch carries several)."""
    call = Call()
    while len(call.statuses) < MAX_TRIES:
        try:
            response = post()
        except (requests.ConnectionError, requests.Timeout):
            call.statuses.append(NO_ANSWER)
            continue
        call.statuses.append(response.status_code)
        if response.status_code in done:
            try:
                call.body = response.json()
            except ValueError:
                call.body = response.text
            break
        time.sleep(BACKOFF_SECONDS)
    log.deliveries += events * len(call.statuses)
    log.statuses.update({status: events * n for status, n in Counter(call.statuses).items()})
    return call


def _orders_of(db: firestore.Client, users: Iterable[User]) -> dict[str, list[str]]:
    """uid -> ids of the orders that user has."""
    found: dict[str, list[str]] = {}
    for user in users:
        query = db.collection("orders").where(filter=FieldFilter("uid", "==", user.uid))
        found[user.uid] = [doc.id for doc in query.stream()]
    return found


@dataclass(frozen=True)
class Protocol:
    """How one endpoint is called, and how its answers read."""

    function: str
    ok: int
    conflict: int
    reused: int
    """The status of a reused key with another body."""

    def post(self, user: User, key: str, order: dict[str, Any]) -> requests.Response:
        """Send `order` with `key` as `user`."""
        url = function_url(self.function)
        if self.function == "create_order":
            headers = order_headers(user, key)
            return requests.post(url, json=order, headers=headers, timeout=CLIENT_TIMEOUT_SECONDS)
        data = {**order, "idempotencyKey": key}
        headers = {"Content-Type": "application/json", **user.bearer}
        return requests.post(
            url, json={"data": data}, headers=headers, timeout=CLIENT_TIMEOUT_SECONDS
        )

    def order_id(self, body: Any) -> str:
        """The orderId of a success."""
        answer = body if self.function == "create_order" else body["result"]
        return str(answer["orderId"])


HTTP = Protocol("create_order", ok=201, conflict=409, reused=422)
CALLABLE = Protocol("create_order_callable", ok=200, conflict=409, reused=400)
"""The callable protocol: ABORTED is HTTP 409, FAILED_PRECONDITION HTTP 400."""


def play_orders(db: firestore.Client, protocol: Protocol) -> Outcome:
    """The order scene through `protocol` (see the module docstring)."""
    log = DeliveryLog(events=3)  # the order, the same key with another body, another caller
    first, second = sign_up(), sign_up()
    key = new_key()

    def send(user: User, order: dict[str, Any], done: set[int]) -> Call:
        return _send(lambda: protocol.post(user, key, order), log, done)

    with ThreadPoolExecutor(max_workers=COPIES) as pool:
        copies = list(pool.map(lambda _: send(first, ORDER, {protocol.ok}), range(COPIES)))
    later = [send(first, ORDER, {protocol.ok}) for _ in range(2)]
    reused = send(first, OTHER_ORDER, {protocol.ok, protocol.reused})
    other = [send(second, ORDER, {protocol.ok}) for _ in range(2)]

    problems: list[str] = []
    placed = _orders_of(db, (first, second))
    answered = {protocol.order_id(c.body) for c in copies + later if c.body is not None}
    if answered != set(placed[first.uid]):
        problems.append(f"answers carry {sorted(answered)}, orders are {placed[first.uid]}")
    statuses = {s for c in copies + later for s in c.statuses}
    if not statuses <= {protocol.ok, protocol.conflict, NO_ANSWER}:
        problems.append(f"copies were answered {sorted(statuses)}")
    if reused.statuses[-1:] != [protocol.reused]:
        problems.append(f"another body with the key got {reused.statuses}")
    theirs = {protocol.order_id(c.body) for c in other if c.body is not None}
    if theirs != set(placed[second.uid]) or theirs & answered:
        problems.append(f"the other caller got {sorted(theirs)}, has {placed[second.uid]}")
    log.undelivered.extend(
        f"{protocol.function} request" for c in copies + later + other if c.body is None
    )
    conflicts = sum(s == protocol.conflict for c in copies + later for s in c.statuses)
    detail = (
        f"orders, one per caller: {COPIES} copies at once + 2 later all got one orderId "
        f"({conflicts} x {protocol.conflict} while the first ran); the key with another body: "
        f"{protocol.reused}; another caller, same key: an order of their own"
    )
    return Outcome(log, sum(map(len, placed.values())), 2, detail, problems)


class LineScene:
    """The LINE scene: batches redelivered to the emulator's `receive_line_webhook`."""

    def __init__(self, project: str, db: firestore.Client):
        """Watch `webhooks` (from now on) through the audit subscription."""
        ensure_topic(project, "webhooks", subscription=LINE_AUDIT)
        self.db = db
        self.audit = SubscriberClient().subscription_path(project, LINE_AUDIT)
        self.log = DeliveryLog()
        self.event_ids: list[str] = []
        self.problems: list[str] = []

    def play(self) -> list[PubsubMessage]:
        """Deliver the batches, then a forged one; the messages the ingress published."""
        url = function_url("receive_line_webhook")
        batches = [[line_event_id() for _ in range(EVENTS_PER_BATCH)] for _ in range(LINE_BATCHES)]
        self.event_ids = [event for batch in batches for event in batch]
        self.log.events = len(self.event_ids)

        def deliver(batch: list[str], copy: int) -> Call:
            body = line_body(*batch, redelivery=copy > 0)
            post = lambda: requests.post(  # noqa: E731
                url, data=body, headers=line_headers(body), timeout=CLIENT_TIMEOUT_SECONDS
            )
            return _send(post, self.log, {200}, events=len(batch))

        calls: list[Call] = []
        with ThreadPoolExecutor(max_workers=COPIES) as pool:
            for batch in batches:  # one batch after the other, its copies at once
                calls += pool.map(lambda copy, batch=batch: deliver(batch, copy), range(COPIES))
        self.log.undelivered.extend("LINE batch" for call in calls if call.body is None)
        published = [
            m for m in pull_all(self.audit) if m.attributes.get("eventKey") in self.event_ids
        ]
        self._forge(url)
        return published

    def _forge(self, url: str) -> None:
        """A batch signed with another secret: 401, no record, no message."""
        records = self.db.collection("triggerEvents")
        before = len(list(records.list_documents()))
        forged = line_event_id()
        body = line_body(forged)
        headers = line_headers(body, secret="not-the-channel-secret")
        post = lambda: requests.post(  # noqa: E731
            url, data=body, headers=headers, timeout=CLIENT_TIMEOUT_SECONDS
        )
        status = _send(post, DeliveryLog(), {200, 401}).statuses[-1]
        leaked = [m for m in pull_all(self.audit) if m.attributes.get("eventKey") == forged]
        after = len(list(records.list_documents()))
        if status != 401 or leaked or after != before:
            self.problems.append(
                f"a forged signature got {status}, {len(leaked)} messages, {after - before} records"
            )

    def outcome(self, published: list[PubsubMessage], forwarded_keys: list[str]) -> Outcome:
        """The row: events published once each, and forwarded to the LINE route once each."""
        keys = Counter(m.attributes["eventKey"] for m in published)
        if sorted(keys) != sorted(self.event_ids) or set(keys.values()) != {1}:
            self.problems.append(f"published {dict(keys)}")
        reached = Counter(key.removesuffix("-forward_webhook") for key in forwarded_keys)
        mine = Counter({event: reached[event] for event in self.event_ids if reached[event]})
        detail = (
            f"events published to webhooks: {sum(keys.values())} ({len(keys)} distinct); "
            f"on the LINE route: {sum(mine.values())}; a forged signature: 401, nothing written"
        )
        problems = list(self.problems)
        if sorted(mine.elements()) != sorted(self.event_ids):
            problems.append(f"forwarded {dict(mine)}")
        return Outcome(self.log, sum(keys.values()), len(self.event_ids), detail, problems)
