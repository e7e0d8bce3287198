"""What the fault tests share: served functions started together, a platform that redelivers,
the functions' log lines, a receiver that records every attempt (a Firestore emulator of
their own: `demo.own_firestore`).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import requests
from google.cloud import firestore

from demo.events import HttpEvent, firestore_event
from demo.serve import ROOT, ServedFunction, served_function

PROJECT = "demo-exactly-once"
CRASH_SOURCE = Path(__file__).resolve().parent / "crash_functions.py"
SERVED_LEASE_SECONDS = 5
"""`DEDUP_LEASE_SECONDS` of a served function whose lease a test waits out. A delivery starts its
handler only while its lease has a tenth of its length left on the instance's own clock
(`Budget.lease_late`), counted from when it sent the claim: 4.5 s here for the claim's commit to
come back and the handler to start, where one RPC takes well under a second even with both
cores busy. With 2 s it had 1.8 s: one commit stretched by a busy machine, and a crash test's
delivery would give its lease back instead of reaching its crash point (docs/testing.md,
"Under load")."""


def unique() -> str:
    """A fresh id part: served functions remember the keys they sent, so ids are never reused."""
    return uuid.uuid4().hex[:8]


# --- Served functions ---------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One function server to start: function name, extra environment, source file."""

    name: str
    env: Mapping[str, str] = field(default_factory=dict)
    source: Path | None = None


@contextmanager
def serving(specs: Mapping[str, Spec], log_dir: Path) -> Iterator[dict[str, ServedFunction]]:
    """Start every server at once (their start-ups overlap) and stop them all at the end.

    Each server logs to `log_dir/<label>.log`.
    """
    with ExitStack() as stack:

        def start(label: str, spec: Spec) -> ServedFunction:
            # A source outside the root (crash_functions.py) imports main.py from the root.
            env = {**spec.env, "PYTHONPATH": str(ROOT)} if spec.source else spec.env
            manager = served_function(
                spec.name, env, log=log_dir / f"{label}.log", source=spec.source
            )
            served = manager.__enter__()
            with lock:
                stack.push(manager.__exit__)
            return served

        lock = threading.Lock()
        with ThreadPoolExecutor(max_workers=len(specs)) as pool:
            futures = {label: pool.submit(start, label, spec) for label, spec in specs.items()}
        yield {label: future.result() for label, future in futures.items()}


# --- The platform -------------------------------------------------------------------------

NO_ANSWER = 0
"""Status recorded for a delivery that got no HTTP answer (process killed, platform timeout)."""


@dataclass(frozen=True)
class Answer:
    """One delivery as the platform saw it."""

    status: int
    """HTTP status, or NO_ANSWER."""
    seconds: float

    @property
    def acknowledged(self) -> bool:
        """2xx: the platform stops retrying."""
        return 200 <= self.status < 300


def deliver(served: ServedFunction, event: HttpEvent, *, timeout: float = 60.0) -> Answer:
    """POST the event once, as the platform does; no answer within `timeout` is a failure."""
    started = time.monotonic()
    try:
        status = requests.post(
            served.url, data=event.body, headers=dict(event.headers), timeout=timeout
        ).status_code
    except requests.RequestException:
        status = NO_ANSWER
    return Answer(status, time.monotonic() - started)


def redeliver_until_acknowledged(
    served: ServedFunction, event: HttpEvent, *, within: float, pause: float = 0.25
) -> list[Answer]:
    """Retry like the platform (quicker) until a 2xx; every answer, the 2xx last."""
    deadline = time.monotonic() + within
    answers: list[Answer] = []
    while True:
        answer = deliver(served, event, timeout=max(1.0, deadline - time.monotonic()))
        answers.append(answer)
        if answer.acknowledged:
            return answers
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{event.description} not acknowledged within {within:.0f} s: "
                f"{[a.status for a in answers]}"
            )
        time.sleep(pause)


def wait_for_crash_point(crash_file: Path, point: str, *, within: float = 20.0) -> None:
    """Block until the served function reports it stopped at `point`."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if crash_file.exists() and point in crash_file.read_text().split():
            return
        time.sleep(0.02)
    raise AssertionError(f"crash point {point!r} not reached within {within:.0f} s")


def crash_during(served: ServedFunction, crash_file: Path, point: str, event: HttpEvent) -> Answer:
    """Deliver `event` to a crash server; SIGKILL its process group once it stops at `point`.

    Returns the killed delivery's answer, as the platform saw it (NO_ANSWER).
    """
    answers: list[Answer] = []
    flight = threading.Thread(target=lambda: answers.append(deliver(served, event)))
    flight.start()
    wait_for_crash_point(crash_file, point)
    served.kill()
    flight.join(timeout=30)
    [answer] = answers
    return answer


# --- Test data ----------------------------------------------------------------------------


def publish_post(db: firestore.Client, post_id: str, author: str = "ann") -> HttpEvent:
    """Create a published post by `author`, who has two followers with tokens; its event."""
    users = db.collection("users")
    users.document(author).set({"followers": ["ben", "cat"]})
    users.document("ben").set({"fcmToken": "token-ben"})
    users.document("cat").set({"fcmToken": "token-cat"})
    ref = db.collection("posts").document(post_id)
    before = ref.get()
    ref.set({"authorId": author, "published": True})
    return firestore_event(ref.path, before, ref.get(), project=PROJECT)


def published_count(db: firestore.Client, author: str = "ann") -> int:
    """`users/<author>.publishedPostCount` (0 when unset)."""
    fields = db.collection("users").document(author).get().to_dict() or {}
    return int(fields.get("publishedPostCount", 0))


# --- The functions' log lines -------------------------------------------------------------


def delivery_lines(log: Path) -> list[dict[str, object]]:
    """The dedup log lines (one JSON object per delivery, with an `outcome`) in `log`."""
    lines = []
    for raw in log.read_text(errors="replace").splitlines():
        if not raw.startswith("{"):
            continue
        with suppress(json.JSONDecodeError):
            entry = json.loads(raw)
            if isinstance(entry, dict) and "outcome" in entry:
                lines.append(entry)
    return lines


def outcomes(log: Path, key: str | None = None) -> list[str]:
    """The `outcome` of each delivery logged in `log` (for record `key` only, if given)."""
    return [
        str(line["outcome"])
        for line in delivery_lines(log)
        if key is None or line.get("key") == key
    ]


# --- Records ------------------------------------------------------------------------------


def record(db: firestore.Client, key: str) -> dict[str, object] | None:
    """The dedup record `triggerEvents/<key>` as stored, or None."""
    return db.collection("triggerEvents").document(key).get().to_dict()
