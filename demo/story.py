"""The scripted story `make demo` tells, and the table that checks it.

Authors create, publish, unpublish and delete posts; webhook messages are published; orders
are enqueued through the transactional outbox, and one transaction is rolled back; posts are
saved with their search-index task enqueued through the outbox (one save rolled back), the
relay creates the tasks in the Cloud Tasks emulator, and each task is dispatched to
`index_post`; the orders clients place through `create_order` are fulfilled by `fulfil_order`,
three durable steps (`demo.fulfilment`). Every event
goes to its functions four times at once and is retried until one delivery succeeds; the
webhook receiver fails the first request of one route with a 503. Last, with the Functions
emulator's triggers switched on, objects are uploaded, the digest is scheduled and Crashlytics
alerts are published, through the emulators (`demo.emulator_triggers`). Then each function's
effects are counted where they land (the counters, the receiver, a Pub/Sub subscription,
Firestore) and compared with what exactly-once predicts.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

from dedup.outbox import enqueue, enqueue_task
from demo.emulator_triggers import (
    ALERT_COPIES,
    play_alerts,
    play_schedule,
    play_uploads,
    receiver_port,
    set_background_triggers,
)
from demo.events import firestore_event, pubsub_event
from demo.fulfilment import PAYMENTS_PATH, RECEIPTS_PATH, play_fulfilment
from demo.http_story import CALLABLE, HTTP, LineScene, Outcome, play_orders
from demo.platform import COPIES, DeliveryLog, deliver_at_least_once
from demo.pubsub import ensure_topic, pull_all
from demo.receiver import Receiver, running_receiver
from demo.serve import ServedFunction, served_function
from demo.tasks import task_dispatch

PROJECT = os.environ.get("GCLOUD_PROJECT", "demo-exactly-once")
ORDERS_TOPIC = "demo-orders"
ORDERS_AUDIT = "demo-orders-audit"
FUNCTIONS = (
    "sync_published_count", "send_post_notification", "forward_webhook", "relay_outbox",
    "fulfil_order",
)  # fmt: skip
"""The event functions (signature cloudevent)."""
INDEX_POST = "index_post"
"""The task-queue function's row (deployed as `indexPost`, see functions/index_post.py)."""
INDEX_QUEUE = "demo-indexPost"
"""The demo's own queue in the Cloud Tasks emulator (the Functions emulator, when it runs,
owns `indexPost`'s): it dispatches to the receiver (`TASK_CAPTURE_PATH`), which records each
task; the demo then dispatches every task to `index_post` at least once, as the platform."""
TASK_CAPTURE_PATH = f"/tasks/{INDEX_QUEUE}"
SEARCH_PATH = "/search"
TASK_WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class Row:
    """One line of the result table."""

    function: str
    events: int
    deliveries: int
    failed_deliveries: int
    """Deliveries answered with an error and retried (LeaseHeld, a released lease)."""
    effects: int
    expected: int
    detail: str
    undelivered: int
    """Copies still failing when the retry budget ran out."""
    problems: tuple[str, ...] = ()
    """The row's other checks that failed (an answer that disagrees with the effect, say)."""

    @property
    def ok(self) -> bool:
        """Effects match the expectation, every delivery was eventually acknowledged, and the
        row's other checks held."""
        return self.effects == self.expected and not self.undelivered and not self.problems


class Story:
    """Writes to the emulators, builds each resulting event, delivers it at least once."""

    def __init__(
        self, db: firestore.Client, servers: dict[str, ServedFunction], receiver: Receiver
    ):
        """Use `db` for writes and `servers` (one per function) for deliveries."""
        self.db = db
        self.servers = servers
        self.receiver = receiver
        self.logs = {name: DeliveryLog() for name in (*FUNCTIONS, INDEX_POST)}
        self.publisher = PublisherClient()
        self.subscriber = SubscriberClient()
        self.expected_notifications = 0
        self.count_changes = 0
        self.expected_count_changes = 0
        self.count_mismatches: list[str] = []
        self.expected_webhooks = 0
        self.expected_orders = 0
        self.expected_indexed = 0
        self.relayed_tasks = 0
        self.outcomes: dict[str, Outcome] = {}
        self.line: LineScene | None = None
        self.line_published: list[Any] = []
        self.triggered: dict[str, Outcome] = {}
        """The rows of the event functions the Functions emulator served
        (`demo.emulator_triggers`)."""

    # --- the platform's side ------------------------------------------------------------------

    def _deliver(self, function: str, event: Any) -> None:
        deliver_at_least_once(self.servers[function], event, self.logs[function])

    def write_post(
        self, post_id: str, change: Callable[[firestore.DocumentReference], object]
    ) -> None:
        """Apply `change` to posts/<post_id>; deliver the event to both post functions."""
        ref = self.db.collection("posts").document(post_id)
        before, counts_before, truth_before = ref.get(), self.counts(), self.true_counts()
        change(ref)
        after = ref.get()
        event = firestore_event(ref.path, before, after, project=PROJECT)
        for function in ("sync_published_count", "send_post_notification"):
            self._deliver(function, event)
        counts_after, truth_after = self.counts(), self.true_counts()
        self.count_changes += _distance(counts_before, counts_after)
        self.expected_count_changes += _distance(truth_before, truth_after)
        if counts_after != truth_after:
            self.count_mismatches.append(
                f"after writing {post_id}: {counts_after} != {truth_after}"
            )

    def counts(self) -> Counter[str]:
        """publishedPostCount of every user, as the function maintains it (zeros dropped)."""
        counts = Counter(
            {
                user.id: int((user.to_dict() or {}).get("publishedPostCount", 0))
                for user in self.db.collection("users").stream()
            }
        )
        return +counts

    def true_counts(self) -> Counter[str]:
        """Published posts per author, counted from the posts themselves."""
        published = self.db.collection("posts").where(filter=FieldFilter("published", "==", True))
        return Counter(str((post.to_dict() or {})["authorId"]) for post in published.stream())

    def publish_webhook(self, body: dict[str, Any], route: str | None) -> None:
        """Publish a webhook message to the `webhooks` topic and deliver its event."""
        topic = self.publisher.topic_path(PROJECT, "webhooks")
        attributes = {"route": route} if route else {}
        data = json.dumps(body).encode()
        message_id = self.publisher.publish(topic, data, **attributes).result(timeout=30)
        self.expected_webhooks += 1
        event = pubsub_event(
            "webhooks", data, project=PROJECT, message_id=message_id, attributes=attributes
        )
        self._deliver("forward_webhook", event)

    def place_order(self, order_id: str, *, roll_back: bool = False) -> None:
        """Write orders/<id> and enqueue its message in one transaction; deliver the event."""
        transaction = self.db.transaction()
        holder: dict[str, firestore.DocumentReference] = {}

        @firestore.transactional
        def place(tx: firestore.Transaction) -> None:
            tx.set(self.db.collection("orders").document(order_id), {"total": 42})
            holder["outbox"] = enqueue(
                tx, ORDERS_TOPIC, json.dumps({"orderId": order_id}), {"kind": "order"}
            )
            if roll_back:
                raise RuntimeError("payment declined")  # rolls the whole transaction back

        try:
            place(transaction)
        except RuntimeError:
            assert not holder["outbox"].get().exists, "a rolled-back outbox document exists"
            return
        self.expected_orders += 1
        outbox = holder["outbox"]
        event = firestore_event(outbox.path, None, outbox.get(), project=PROJECT, change="created")
        self._deliver("relay_outbox", event)

    def save_post_for_search(self, post_id: str, *, roll_back: bool = False) -> None:
        """Save posts/<id> and enqueue its index task in one transaction; relay it."""
        holder: dict[str, firestore.DocumentReference] = {}

        @firestore.transactional
        def save(tx: firestore.Transaction) -> None:
            tx.set(self.db.collection("posts").document(post_id), {"title": f"post {post_id}"})
            holder["outbox"] = enqueue_task(tx, INDEX_QUEUE, {"postId": post_id})
            if roll_back:
                raise RuntimeError("validation failed")  # rolls the whole transaction back

        try:
            save(self.db.transaction())
        except RuntimeError:
            assert not holder["outbox"].get().exists, "a rolled-back outbox document exists"
            return
        self.expected_indexed += 1
        outbox = holder["outbox"]
        event = firestore_event(outbox.path, None, outbox.get(), project=PROJECT, change="created")
        self._deliver("relay_outbox", event)
        self.relayed_tasks += 1

    def dispatch_tasks(self) -> None:
        """Wait for the emulator to dispatch every created task to the receiver, then dispatch
        each one to index_post at least once (4 copies at once, retried)."""
        deadline = time.monotonic() + TASK_WAIT_SECONDS
        while len(self.captured_tasks()) < self.expected_indexed and time.monotonic() < deadline:
            time.sleep(0.1)
        for name, data in self.captured_tasks().items():
            deliver_at_least_once(
                self.servers[INDEX_POST], task_dispatch(name, data), self.logs[INDEX_POST]
            )

    def captured_tasks(self) -> dict[str, Any]:
        """Task name -> data of every task the Cloud Tasks emulator dispatched so far."""
        return {
            a.headers.get("X-CloudTasks-TaskName", ""): json.loads(a.body)["data"]
            for a in self.receiver.attempts_to(TASK_CAPTURE_PATH)
        }

    # --- the story ------------------------------------------------------------------------------

    def run(self) -> None:
        """Play every scene."""
        users = self.db.collection("users")
        users.document("alice").set({"followers": ["bob", "carol"], "fcmToken": "token-alice"})
        users.document("bob").set({"followers": ["alice"], "fcmToken": "token-bob"})
        users.document("carol").set({"followers": ["alice", "dave"], "fcmToken": "token-carol"})
        users.document("dave").set({"followers": []})

        self.write_post("p1", lambda r: r.set({"authorId": "alice", "published": True}))
        self.write_post("p2", lambda r: r.set({"authorId": "alice", "published": False}))
        self.write_post("p2", lambda r: r.update({"published": True}))
        self.write_post("p3", lambda r: r.set({"authorId": "bob", "published": True}))
        self.write_post("p2", lambda r: r.update({"published": False}))
        self.write_post("p2", lambda r: r.update({"published": True}))  # republished: no new notice
        self.write_post("p3", lambda r: r.delete())
        self.write_post("p4", lambda r: r.set({"authorId": "carol", "published": True}))
        self.write_post("p4", lambda r: r.update({"title": "edited"}))
        self.write_post("p5", lambda r: r.set({"authorId": "dave", "published": False}))
        self.write_post("p4", lambda r: r.delete())
        self.expected_notifications = 4  # first publications: p1, p2, p3, p4

        self.receiver.fail("/webhooks/line", 503, times=1)  # fails once, then succeeds on retry
        for n, route in enumerate(["line", "line", None, "billing", "line"]):
            self.publish_webhook({"events": [{"type": "message", "n": n}]}, route)

        for order in ("o1", "o2", "o3"):
            self.place_order(order)
        self.place_order("o4", roll_back=True)

        for post in ("s1", "s2"):
            self.save_post_for_search(post)
        self.save_post_for_search("s3", roll_back=True)  # indexes nothing
        self.save_post_for_search("s4")
        self.dispatch_tasks()

        self.outcomes[HTTP.function] = play_orders(self.db, HTTP)
        self.outcomes[CALLABLE.function] = play_orders(self.db, CALLABLE)
        self.outcomes["fulfil_order"] = play_fulfilment(
            PROJECT, self.db, self.servers["fulfil_order"], self.logs["fulfil_order"],
            self.receiver,
        )  # fmt: skip
        self.line = LineScene(PROJECT, self.db)
        for message in self.line.play():  # the platform delivers each one to forward_webhook
            self.expected_webhooks += 1
            attributes = dict(message.attributes)
            event = pubsub_event(
                "webhooks", message.data, project=PROJECT, message_id=message.message_id,
                attributes=attributes,
            )  # fmt: skip
            self._deliver("forward_webhook", event)
            self.line_published.append(message)

        # Last, since the Functions emulator's triggers must be on for these: no write of the
        # story's may reach its other functions meanwhile.
        set_background_triggers(True)
        try:
            self.triggered["register_upload"] = play_uploads(PROJECT, self.db)
            self.triggered["daily_digest"] = play_schedule(PROJECT, self.db, self.receiver)
            self.triggered["alert_new_fatal_issue"] = play_alerts(self.receiver)
        finally:
            set_background_triggers(False)

    # --- the count ------------------------------------------------------------------------------

    def relayed_orders(self) -> list[str]:
        """outboxId of every message that reached the orders topic."""
        subscription = self.subscriber.subscription_path(PROJECT, ORDERS_AUDIT)
        return [message.attributes["outboxId"] for message in pull_all(subscription)]

    def rows(self) -> list[Row]:
        """Effects per function, counted where they land."""
        notices = self.receiver.applied("/notify")
        webhooks = [r for r in self.receiver.applied() if r.path.startswith("/webhooks/")]
        orders = self.relayed_orders()
        line_tries = len(self.receiver.attempts_to("/webhooks/line"))
        indexed = self.receiver.applied(SEARCH_PATH)
        tasks = self.captured_tasks()
        return [
            self._row(
                "sync_published_count",
                self.count_changes,
                self.expected_count_changes,
                "+1/-1 steps of publishedPostCount; after every write it equalled the "
                "published posts"
                if not self.count_mismatches
                else "; ".join(self.count_mismatches),
            ),
            self._row(
                "send_post_notification",
                len(notices),
                self.expected_notifications,
                f"POST /notify, {len({r.idempotency_key for r in notices})} distinct keys",
            ),
            self._row(
                "forward_webhook",
                len(webhooks),
                self.expected_webhooks,
                f"POST /webhooks/*; a 503 was retried ({line_tries} tries on /line)",
            ),
            self._row(
                "relay_outbox",
                len(orders),
                self.expected_orders,
                f"on {ORDERS_TOPIC}, {len(set(orders))} distinct outboxIds; a rollback sent none",
            ),
            self._row(
                INDEX_POST,
                len(indexed),
                self.expected_indexed,
                f"POST {SEARCH_PATH}, {len({r.idempotency_key for r in indexed})} distinct keys; "
                f"{len(tasks)} tasks from {self.relayed_tasks} relayed saves; a rollback "
                f"indexed nothing"
                if "s3" not in {d.get("postId") for d in tasks.values()}
                else "the rolled-back post s3 was enqueued",
            ),
            *self.http_rows(),
        ]

    def http_rows(self) -> list[Row]:
        """The rows of the functions the Functions emulator served (`demo.http_story`,
        `demo.emulator_triggers`), and `fulfil_order`'s after the orders' (`demo.fulfilment`)."""
        outcomes = dict(self.outcomes)
        if self.line is not None:
            keys = [a.idempotency_key or "" for a in self.receiver.applied("/webhooks/line")]
            outcomes["receive_line_webhook"] = self.line.outcome(self.line_published, keys)
        outcomes.update(self.triggered)
        return [
            _outcome_row(name, outcome.log, outcome.effects, outcome.expected, outcome.detail,
                         outcome.problems)
            for name, outcome in outcomes.items()
        ]  # fmt: skip

    def _row(self, function: str, effects: int, expected: int, detail: str) -> Row:
        return _outcome_row(function, self.logs[function], effects, expected, detail, [])


def delivered_copies(function: str) -> int:
    """How many copies of each event the story delivers to `function` at least: an alert is
    published `ALERT_COPIES` times, every other event `COPIES` times; 0 for the order
    functions, whose requests the story counts itself (retried copies, a request without
    its key)."""
    if function.startswith("create_order"):
        return 0
    return ALERT_COPIES if function == "alert_new_fatal_issue" else COPIES


def _outcome_row(
    function: str,
    log: DeliveryLog,
    effects: int,
    expected: int,
    detail: str,
    problems: list[str],
) -> Row:
    failed = sum(n for status, n in log.statuses.items() if not 200 <= status < 300)
    copies = delivered_copies(function)
    if copies and log.deliveries < copies * log.events:
        problems = [
            *problems,
            f"{log.deliveries} deliveries of {log.events} events, not {copies} copies each",
        ]
    shown = "; ".join(problems) if problems else detail
    return Row(
        function, log.events, log.deliveries, failed, effects, expected, shown,
        len(log.undelivered), tuple(problems),
    )  # fmt: skip


def _distance(before: Counter[str], after: Counter[str]) -> int:
    """How many +1/-1 steps turn one set of counts into the other."""
    return sum(abs(after[user] - before[user]) for user in set(before) | set(after))


def ensure_index_queue(project: str, receiver: Receiver) -> None:
    """The demo's queue in the Cloud Tasks emulator, dispatching to the receiver."""
    host = os.environ.get("CLOUD_TASKS_EMULATOR_HOST")
    if not host:
        raise RuntimeError("CLOUD_TASKS_EMULATOR_HOST is not set: run the demo with `make demo`")
    queue = f"http://{host}/projects/{project}/locations/us-central1/queues/{INDEX_QUEUE}"
    response = requests.post(
        queue, json={"defaultUri": f"{receiver.base_url}{TASK_CAPTURE_PATH}"}, timeout=10
    )
    response.raise_for_status()


def ensure_topics(project: str) -> None:
    """The topics and the audit subscription the story uses (idempotent)."""
    ensure_topic(project, "webhooks")
    ensure_topic(project, ORDERS_TOPIC, subscription=ORDERS_AUDIT)


@contextmanager
def demo_servers(receiver: Receiver, log_dir: Path) -> Iterator[dict[str, ServedFunction]]:
    """Each function served on its own, configured to talk to the receiver."""
    env = {
        "WEBHOOK_ROUTES": json.dumps(
            {
                "default": f"{receiver.base_url}/webhooks/default",
                "line": f"{receiver.base_url}/webhooks/line",
            }
        ),
        "NOTIFY_URL": f"{receiver.base_url}/notify",
        "SEARCH_INDEX_URL": f"{receiver.base_url}{SEARCH_PATH}",
        "PAYMENTS_URL": f"{receiver.base_url}{PAYMENTS_PATH}",
        "RECEIPTS_URL": f"{receiver.base_url}{RECEIPTS_PATH}",
        "DEDUP_LEASE_SECONDS": "20",
    }
    with ExitStack() as stack:
        servers = {
            name: stack.enter_context(served_function(name, env, log=log_dir / f"{name}.log"))
            for name in FUNCTIONS
        }
        servers[INDEX_POST] = stack.enter_context(
            served_function("indexPost", env, log=log_dir / "indexPost.log", signature_type="http")
        )
        yield servers


def switch_off_emulator_triggers() -> None:
    """The Functions emulator (started only because the Cloud Tasks emulator needs it) must
    not deliver the story's writes too: the story plays the platform itself."""
    hub = os.environ.get("FIREBASE_EMULATOR_HUB")
    if hub:
        response = requests.put(f"http://{hub}/functions/disableBackgroundTriggers", timeout=120)
        if response.status_code != 400:  # 400: the Functions emulator is not running
            response.raise_for_status()


def play(log_dir: Path, receiver: Receiver | None = None) -> list[Row]:
    """Run the whole story against the emulators and return the table.

    The receiver listens on the port `.env.local` points the Functions emulator's functions at,
    unless one already listens there (a test session's): pass it as `receiver`.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    switch_off_emulator_triggers()
    ensure_topics(PROJECT)
    db = firestore.Client(project=PROJECT)
    with ExitStack() as stack:
        if receiver is None:
            receiver = stack.enter_context(running_receiver(receiver_port()))
        servers = stack.enter_context(demo_servers(receiver, log_dir))
        ensure_index_queue(PROJECT, receiver)
        story = Story(db, servers, receiver)
        story.run()
        return story.rows()
