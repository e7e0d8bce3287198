"""Seeded fuzzing of the four event functions, served in-process on the emulators.

For every mutated request: the status is below 500 (nothing here is retryable by nature: the
store and the receiver are up), the answer names no exception type and echoes no header value,
and a refused (4xx) request leaves no record and no effect. Every `CONTROL_EVERY` requests a
fresh valid event is delivered and must still take effect exactly once. At the end no record
is left `in_progress` or `dead`: nothing would be retried until the platform gives up.

`FUZZ_EXAMPLES` (default 300) sets the mutated requests per function; the figures of a run
go to `.cache/fuzz/<function>.json` (see docs/malformed-input.md for a long run's).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from google.cloud import firestore
from google.cloud.pubsub_v1 import PublisherClient
from hypothesis import HealthCheck, given, settings

from demo.events import HttpEvent, firestore_event, pubsub_event
from demo.receiver import Receiver
from tests.conftest import PROJECT
from tests.functions.conftest import InProcessFunction
from tests.fuzz.mutators import Labelled, mutations

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
CONTROL_EVERY = 10
EXCEPTION_NAME = re.compile(r"\b[A-Z][A-Za-z]+(?:Error|Exception)\b")
RESULTS = Path(__file__).resolve().parents[2] / ".cache" / "fuzz"


@dataclass
class Target:
    """A function under fuzz: its event kind, a fresh valid event, and its effects so far."""

    kind: str
    fresh: Callable[[firestore.Client, str], HttpEvent]
    effects: Callable[[firestore.Client, Receiver], int]


def fresh_post(db: firestore.Client, name: str) -> HttpEvent:
    ref = db.document(f"posts/{name}")
    ref.set({"authorId": "ann", "published": True})
    return firestore_event(ref.path, None, ref.get(), project=PROJECT)


def fresh_outbox(db: firestore.Client, name: str) -> HttpEvent:
    ref = db.document(f"outbox/{name}")
    ref.set({"topic": FUZZ_TOPIC, "data": b"x", "attributes": {"k": "v"}})
    return firestore_event(ref.path, None, ref.get(), project=PROJECT, change="created")


def fresh_message(db: firestore.Client, name: str) -> HttpEvent:
    return pubsub_event("webhooks", b'{"n": 1}', project=PROJECT, message_id=name)


def counted(db: firestore.Client, receiver: Receiver) -> int:
    users = (d.to_dict() or {} for d in db.collection("users").stream())
    return sum(int(u.get("publishedPostCount", 0)) for u in users)


def marked(db: firestore.Client, receiver: Receiver) -> int:
    docs = [*db.collection("outbox").stream(), *db.collection("users").stream()]
    return sum(1 for d in docs if "messageId" in (d.to_dict() or {}))


FUZZ_TOPIC = f"fuzz-{uuid.uuid4().hex[:8]}"
TARGETS = {
    "sync_published_count": Target("firestore", fresh_post, counted),
    "send_post_notification": Target(
        "firestore", fresh_post, lambda db, r: len(r.attempts_to("/notify"))
    ),
    "relay_outbox": Target("firestore", fresh_outbox, marked),
    "forward_webhook": Target(
        "pubsub", fresh_message, lambda db, r: len(r.attempts_to("/webhooks/default"))
    ),
}


@dataclass
class Stats:
    """What one function's campaign saw."""

    requests: int = 0
    controls: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    refused_by: Counter[str] = field(default_factory=Counter)

    def write(self, function: str, examples: int = EXAMPLES, **settings: int) -> None:
        """The figures of `function`'s campaign, to `.cache/fuzz/<function>.json`."""
        RESULTS.mkdir(parents=True, exist_ok=True)
        summary = {
            "function": function,
            "examples_setting": examples,
            **settings,
            "requests": self.requests,
            "controls": self.controls,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "status_5xx": sum(v for k, v in self.statuses.items() if k >= 500),
            "most_common_mutations_refused": dict(self.refused_by.most_common(12)),
        }
        (RESULTS / f"{function}.json").write_text(json.dumps(summary, indent=2) + "\n")


def trace(db: firestore.Client, receiver: Receiver, target: Target) -> tuple[int, int]:
    """(dedup records, effects): what a refused request must leave unchanged."""
    records = len(list(db.collection("triggerEvents").list_documents()))
    return records, target.effects(db, receiver)


@pytest.mark.parametrize("function", list(TARGETS))
def test_fuzzed_requests_are_refused_without_trace_or_retry(
    function: str,
    serve: Callable[[str], InProcessFunction],
    firestore_client: firestore.Client,
    receiver: Receiver,
) -> None:
    """No mutated request gets a 5xx (which the platform would retry until the record is
    dead); refusals leave nothing behind and say nothing of the request; valid events
    interleaved still take effect once."""
    target = TARGETS[function]
    db = firestore_client
    db.document("users/ann").set({"followers": ["ben"]})
    db.document("users/ben").set({"fcmToken": "token-ben"})
    if function == "relay_outbox":
        publisher = PublisherClient()
        publisher.create_topic(name=publisher.topic_path(PROJECT, FUZZ_TOPIC))
    served = serve(function)
    run = uuid.uuid4().hex[:8]
    base = target.fresh(db, f"base-{run}")
    assert served.deliver(base) == 200
    stats = Stats()

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,  # a fixed seed: the same requests on every run
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(mutations(target.kind))
    def one_request(chain: list[Labelled]) -> None:
        bad = base
        for mutation in chain:
            bad = mutation.apply(bad)
        labels = " + ".join(m.label for m in chain)
        before = trace(db, receiver, target)
        response = served.client.post("/", data=bad.body, headers=dict(bad.headers))
        status, text = response.status_code, response.get_data(as_text=True)
        stats.requests += 1
        stats.statuses[status] += 1
        assert status < 500, f"{labels}: {status} {text[:300]}"
        assert not EXCEPTION_NAME.search(text), f"{labels}: {text[:300]}"
        assert "zqecho" not in text, f"{labels}: the answer echoes a header"
        assert len(text) < 1000, labels
        if status >= 400:
            stats.refused_by.update(m.label for m in chain)
            assert trace(db, receiver, target) == before, f"{labels}: refused but left a trace"
        if stats.requests % CONTROL_EVERY == 0:
            stats.controls += 1
            effects = target.effects(db, receiver)
            control = target.fresh(db, f"control-{run}-{stats.controls}")
            assert served.deliver(control) == 200, f"control after {labels}"
            assert target.effects(db, receiver) == effects + 1, f"control after {labels}"

    try:
        one_request()
    finally:
        stats.write(function)
    assert stuck_records(db) == [], "records that the platform would retry until it gives up"


def stuck_records(db: firestore.Client) -> list[tuple[str, str]]:
    """(id, state) of every record left `in_progress` or `dead`."""
    states = (
        (d.id, (d.to_dict() or {}).get("state")) for d in db.collection("triggerEvents").stream()
    )
    return [(key, str(state)) for key, state in states if state in ("in_progress", "dead")]
