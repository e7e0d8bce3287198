"""Faults whose recovery involves waiting: Firestore down, a process killed inside a
transaction, receiver read timeouts.

Each story takes up to about 25 s of mostly idle time, so the three run at once, in one module
fixture, each against its own servers and ids (the outage against a Firestore emulator of
its own). Each test then checks one story's guarantees; a story that failed fails only its
test.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from google.cloud import firestore

from demo.events import HttpEvent, pubsub_event
from demo.own_firestore import own_firestore
from demo.receiver import Attempt, running_receiver
from functions.http_delivery import READ_TIMEOUT_SECONDS
from tests.faults.support import (
    CRASH_SOURCE,
    NO_ANSWER,
    PROJECT,
    Answer,
    Spec,
    crash_during,
    deliver,
    delivery_lines,
    publish_post,
    published_count,
    record,
    redeliver_until_acknowledged,
    serving,
    unique,
)

# --- Story 1: Firestore unavailable -------------------------------------------------------

OUTAGE_EVENTS = 5
"""Per function: the first is delivered before the outage, the others during it."""
PLATFORM_TIMEOUT = 12.0
"""How long this test's platform waits for an answer during the outage before it counts the
delivery as failed (Cloud Functions' default timeout is 60 s); above `FAST_FAILURE_SECONDS`,
so a slow answer is measured, not cut."""
RPC_TIMEOUT_SECONDS = 3
"""DEDUP_RPC_TIMEOUT_SECONDS of the outage story's functions."""
FAST_FAILURE_SECONDS = 2 * RPC_TIMEOUT_SECONDS + 4
"""A lease-mode delivery makes at most two bounded calls before it gives up (the claim, and
the read after a failed create): 6 s. The other 4 s are the request's own, eight at once to two
served functions: a quiet machine answers them in a fraction of a second, a busy one may hold
a process for seconds (with 1 s to spare, the bound raced the machine's load). 10 s is still
a sixth of the 60 s a delivery would hold its instance without the bounds."""


@dataclass(frozen=True)
class OutageStory:
    before: list[Answer]
    """The deliveries made before the outage (one per function)."""
    during: list[Answer]
    """The deliveries made while Firestore was down."""
    posts_during: int
    """POSTs the receiver got while Firestore was down."""
    ran_during: int
    """Deliveries logged as `ran` (effect recorded) while Firestore was down."""
    restart_seconds: float
    recovery: list[list[Answer]]
    """Every event redelivered after the restart until acknowledged."""
    recovery_seconds: float
    count: int
    """The author's publishedPostCount in the end."""
    markers: list[str | None]
    """The state of each event's record in the end."""
    posts: list[Attempt]
    """Every POST the receiver got."""
    message_keys: list[str]


def outage_story(workdir: Path) -> OutageStory:
    """Serve forward_webhook (lease mode, POST) and sync_published_count (transaction mode)
    against an emulator of our own; deliver one event each; stop the emulator; deliver the
    others; restart it from its export; redeliver everything until acknowledged."""
    with own_firestore(workdir) as emulator, running_receiver() as recorder:
        db = emulator.client()
        env = {
            "FIRESTORE_EMULATOR_HOST": emulator.host,
            "WEBHOOK_ROUTES": json.dumps({"default": f"{recorder.base_url}/outage"}),
            "DEDUP_LEASE_SECONDS": "3",
            "DEDUP_RPC_TIMEOUT_SECONDS": str(RPC_TIMEOUT_SECONDS),
        }
        specs = {
            "outage-forward": Spec("forward_webhook", env),
            "outage-count": Spec("sync_published_count", env),
        }
        run = unique()
        posts = [publish_post(db, f"o{n}-{run}", author="olga") for n in range(OUTAGE_EVENTS)]
        messages = [
            pubsub_event("webhooks", b'{"n": %d}' % n, project=PROJECT, message_id=f"o{n}-{run}")
            for n in range(OUTAGE_EVENTS)
        ]
        with serving(specs, workdir) as servers:
            forward, count = servers["outage-forward"], servers["outage-count"]
            jobs = [(count, e) for e in posts] + [(forward, e) for e in messages]
            before = [deliver(count, posts[0]), deliver(forward, messages[0])]
            emulator.stop()
            with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
                during = list(
                    pool.map(
                        lambda job: deliver(*job, timeout=PLATFORM_TIMEOUT),
                        jobs[1:OUTAGE_EVENTS] + jobs[OUTAGE_EVENTS + 1 :],
                    )
                )
            posts_during = len(recorder.attempts_to("/outage")) - 1
            ran_during = sum(
                1
                for label in specs
                for line in delivery_lines(workdir / f"{label}.log")
                if line["outcome"] == "ran"
            ) - len(before)
            restart_seconds = emulator.start()
            db = emulator.client()
            started = time.monotonic()
            with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
                recovery = list(
                    pool.map(lambda job: redeliver_until_acknowledged(*job, within=90), jobs)
                )
            recovery_seconds = time.monotonic() - started
        message_keys = [f"{e.id}-forward_webhook" for e in messages]
        post_keys = [f"{e.id}-sync_published_count" for e in posts]
        return OutageStory(
            before=before,
            during=during,
            posts_during=posts_during,
            ran_during=ran_during,
            restart_seconds=restart_seconds,
            recovery=recovery,
            recovery_seconds=recovery_seconds,
            count=published_count(db, "olga"),
            markers=[
                (record(db, key) or {}).get("state")  # type: ignore[misc]
                for key in message_keys + post_keys
            ],
            posts=recorder.attempts_to("/outage"),
            message_keys=message_keys,
        )


# --- Story 2: killed inside an open transaction -------------------------------------------

INSIDE_THE_TRANSACTION = ("after_claim", "in_handler", "after_effect")


@dataclass(frozen=True)
class LockStory:
    killed: Answer
    count_after_kill: int
    marker_after_kill: str | None
    recovery: list[Answer]
    count: int
    marker: dict[str, object] | None
    outcomes: list[str]


def lock_stories(workdir: Path, db: firestore.Client) -> dict[str, LockStory]:
    """Kill sync_published_count inside its transaction, at each point; then redeliver."""
    specs = {
        point: Spec(
            "sync_published_count",
            {"CRASH_AT": point, "CRASH_FILE": str(workdir / f"{point}.crash")},
            CRASH_SOURCE,
        )
        for point in INSIDE_THE_TRANSACTION
    } | {"recovery": Spec("sync_published_count")}
    run = unique()
    with serving(specs, workdir) as servers:
        events = {
            point: publish_post(db, f"{point}-{run}", author=f"{point}-{run}")
            for point in INSIDE_THE_TRANSACTION
        }
        killed = {
            point: crash_during(servers[point], workdir / f"{point}.crash", point, event)
            for point, event in events.items()
        }
        after_kill = {
            point: (
                published_count(db, f"{point}-{run}"),
                (record(db, f"{event.id}-sync_published_count") or {}).get("state"),
            )
            for point, event in events.items()
        }

        def recover(event: HttpEvent) -> list[Answer]:
            return redeliver_until_acknowledged(servers["recovery"], event, within=150)

        with ThreadPoolExecutor(max_workers=len(events)) as pool:
            recovered = dict(zip(events, pool.map(recover, events.values()), strict=True))
    lines = delivery_lines(workdir / "recovery.log")
    return {
        point: LockStory(
            killed=killed[point],
            count_after_kill=after_kill[point][0],
            marker_after_kill=after_kill[point][1],  # type: ignore[arg-type]
            recovery=recovered[point],
            count=published_count(db, f"{point}-{run}"),
            marker=record(db, f"{event.id}-sync_published_count"),
            outcomes=[
                str(line["outcome"])
                for line in lines
                if line["key"] == f"{event.id}-sync_published_count"
            ],
        )
        for point, event in events.items()
    }


# --- Story 3: receiver read timeouts ------------------------------------------------------


@dataclass(frozen=True)
class TimeoutStory:
    first: Answer
    retry: list[Answer]
    attempts: list[Attempt]
    key: str
    marker: dict[str, object] | None
    outcomes: list[str]


def timeout_stories(workdir: Path, db: firestore.Client) -> dict[str, TimeoutStory]:
    """A receiver that answers after READ_TIMEOUT_SECONDS + 1.5 s (default lease, 60 s),
    for each function at once; then the platform's redelivery."""
    with running_receiver() as recorder:
        env = {
            "WEBHOOK_ROUTES": json.dumps({"default": f"{recorder.base_url}/webhook"}),
            "NOTIFY_URL": f"{recorder.base_url}/notify",
        }
        names = ("forward_webhook", "send_post_notification")
        run = unique()
        cases = {
            "forward_webhook": (
                pubsub_event("webhooks", b"{}", project=PROJECT, message_id=f"t-{run}"),
                "/webhook",
                f"t-{run}-forward_webhook",
            ),
            "send_post_notification": (
                publish_post(db, f"t-{run}", author=f"t-{run}"),
                "/notify",
                f"post-t-{run}-send_post_notification",
            ),
        }
        for _, path, _ in cases.values():
            recorder.script(path, (200, READ_TIMEOUT_SECONDS + 1.5))
        with serving({name: Spec(name, env) for name in names}, workdir) as servers:

            def story(name: str) -> TimeoutStory:
                event, path, key = cases[name]
                first = deliver(servers[name], event)
                retry = redeliver_until_acknowledged(servers[name], event, within=30)
                return TimeoutStory(
                    first, retry, recorder.attempts_to(path), key, record(db, key), []
                )

            with ThreadPoolExecutor(max_workers=2) as pool:
                stories = dict(zip(names, pool.map(story, names), strict=True))
    return {
        name: TimeoutStory(
            s.first,
            s.retry,
            s.attempts,
            s.key,
            s.marker,
            [
                str(line["outcome"])
                for line in delivery_lines(workdir / f"{name}.log")
                if line["key"] == s.key
            ],
        )
        for name, s in stories.items()
    }


# --- The stories, run at once -------------------------------------------------------------


def disable_emulator_triggers() -> None:
    """The stories write posts before any test runs: keep the Functions emulator from
    delivering those writes too (tests.conftest does the same, per test, once)."""
    hub = os.environ.get("FIREBASE_EMULATOR_HUB")
    if hub:
        requests.put(f"http://{hub}/functions/disableBackgroundTriggers", timeout=120)


@dataclass(frozen=True)
class Stories:
    outage: Future[OutageStory]
    locks: Future[dict[str, LockStory]]
    timeouts: Future[dict[str, TimeoutStory]]
    seconds: float


@pytest.fixture(scope="module")
def stories(
    tmp_path_factory: pytest.TempPathFactory, firestore_client: firestore.Client
) -> Stories:
    """Run the three stories concurrently, before the module's first test."""
    disable_emulator_triggers()
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=3) as pool:
        outage = pool.submit(outage_story, tmp_path_factory.mktemp("outage"))
        locks = pool.submit(lock_stories, tmp_path_factory.mktemp("locks"), firestore_client)
        timeouts = pool.submit(
            timeout_stories, tmp_path_factory.mktemp("timeouts"), firestore_client
        )
        for future in (outage, locks, timeouts):
            future.exception()
    return Stories(outage, locks, timeouts, time.monotonic() - started)


def test_firestore_outage_acknowledges_nothing_and_recovers_exactly_once(
    stories: Stories,
) -> None:
    """While Firestore is down, no delivery is acknowledged (each answers non-2xx or not
    within the platform's 8 s), no POST leaves and no delivery records an effect; after the
    emulator restarts (from an export of its data), redeliveries complete and each of the
    10 events has exactly one effect: the counter is 5, the receiver got 5 POSTs under 5
    distinct keys, every record is sent."""
    story = stories.outage.result()
    print(
        f"\noutage: answers during {[(a.status, round(a.seconds, 1)) for a in story.during]}; "
        f"restart {story.restart_seconds:.1f} s; recovery {story.recovery_seconds:.1f} s, "
        f"{[[a.status for a in answers] for answers in story.recovery]}"
    )
    assert [a.status for a in story.before] == [200, 200]
    assert len(story.during) == 2 * (OUTAGE_EVENTS - 1)
    assert not any(a.acknowledged for a in story.during)
    assert story.posts_during == 0
    assert story.ran_during == 0
    assert all(answers[-1].acknowledged for answers in story.recovery)
    assert story.count == OUTAGE_EVENTS
    assert story.markers == ["sent"] * (2 * OUTAGE_EVENTS)
    assert Counter(a.idempotency_key for a in story.posts) == Counter(story.message_keys)


def test_firestore_outage_fails_deliveries_fast(stories: Stories) -> None:
    """While Firestore is down, every delivery, lease mode (forward_webhook) and transaction
    mode (sync_published_count) alike, answers a retryable 5xx within a few RPC deadlines
    (DEDUP_RPC_TIMEOUT_SECONDS), instead of holding the instance for the client library's
    60 s: transactions' begin and commit are bounded too."""
    story = stories.outage.result()
    assert len(story.during) == 2 * (OUTAGE_EVENTS - 1)
    assert all(500 <= a.status < 600 and a.seconds < FAST_FAILURE_SECONDS for a in story.during), [
        (a.status, round(a.seconds, 1)) for a in story.during
    ]


@pytest.mark.parametrize("point", INSIDE_THE_TRANSACTION)
def test_killed_inside_the_transaction_no_window_then_once(stories: Stories, point: str) -> None:
    """Transaction mode, killed inside the open transaction (after it began, inside the
    handler, with the increment and the marker buffered but not committed): nothing was
    applied (counter 0, no marker). The marker is written blind, never read inside the
    transaction, so the dead transaction holds no lock on it: the redelivery runs at once,
    the counter moves exactly once and the marker says sent, attempt 1."""
    story = stories.locks.result()[point]
    print(f"\n{point}: redeliveries {[(a.status, round(a.seconds, 1)) for a in story.recovery]}")
    assert story.killed.status == NO_ANSWER
    assert (story.count_after_kill, story.marker_after_kill) == (0, None)
    assert story.recovery[-1].acknowledged
    assert story.count == 1
    assert story.marker is not None
    assert (story.marker["state"], story.marker["attempts"]) == ("sent", 1)
    assert story.outcomes[-1] == "ran"
    assert set(story.outcomes[:-1]) <= {"unavailable"}


@pytest.mark.parametrize("name", ["forward_webhook", "send_post_notification"])
def test_receiver_timeout_is_retried_with_the_same_key(stories: Stories, name: str) -> None:
    """A receiver slower than the read timeout (20 s) but within the lease: the delivery
    gives up, releases the lease and answers 500; the redelivery POSTs again with the same
    Idempotency-Key. The slow receiver did apply the first POST late, so a naive receiver
    sees two, an idempotent one keeps one."""
    story = stories.timeouts.result()[name]
    print(f"\n{name}: first {story.first.status} after {story.first.seconds:.1f} s")
    assert story.first.status == 500
    assert READ_TIMEOUT_SECONDS <= story.first.seconds < READ_TIMEOUT_SECONDS + 5
    assert [a.status for a in story.retry] == [200]
    assert [a.idempotency_key for a in story.attempts] == [story.key, story.key]
    assert story.outcomes == ["released", "ran"]
    assert story.marker is not None
    assert (story.marker["state"], story.marker["attempts"]) == ("sent", 2)
