"""Which bound a delivery's time budget is (`DedupConfig.time_budget`), and how an entrance
finds the timeout its function declares: no emulator (the records live in the tests'
in-memory store), the platform's decorator applied as a user writes it.

* The config's own timeout (DEDUP_FUNCTION_TIMEOUT_SECONDS, set per function by the gcloud and
  Cloud Run deploys) comes first, then the timeout the function declares, then the lease's
  bound; a declared timeout the lease does not cover gives the lease's bound.
* A function declared inside another (no module attribute holds it) is found too.
* On the platform, a declared timeout the lease does not cover is refused at the first
  delivery, with the `ConfigError` that names the setting.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import flask
import pytest
from cloudevents.http import CloudEvent
from firebase_functions import https_fn, pubsub_fn

from dedup import ConfigError, DedupConfig, Deduplicator, Delivery, SuffixRegistry, trigger_once
from dedup.config import TimeBudget
from dedup.http import IdempotentRequest, idempotent_http
from tests.memory_store import MemoryStore


def test_the_budget_is_the_function_timeout_then_the_declared_one_then_the_lease() -> None:
    """Each rule, with the source the log line names."""
    long_lease = DedupConfig(lease_seconds=600)
    assert long_lease.time_budget(20) == TimeBudget(20.0, "declared_timeout")
    assert long_lease.time_budget() == TimeBudget(590.0, "lease")
    assert long_lease.time_budget(591) == TimeBudget(590.0, "lease")  # the lease cannot cover it
    deployed = DedupConfig(lease_seconds=600, function_timeout_seconds=30)
    assert deployed.time_budget(20) == TimeBudget(30.0, "function_timeout")
    assert deployed.delivery_budget_seconds == 30.0
    env = {"DEDUP_LEASE_SECONDS": "600", "DEDUP_FUNCTION_TIMEOUT_SECONDS": "45"}
    assert DedupConfig.from_env(env).time_budget(20) == TimeBudget(45.0, "function_timeout")
    with pytest.raises(ConfigError, match="DEDUP_FUNCTION_TIMEOUT_SECONDS"):
        DedupConfig.from_env({"DEDUP_FUNCTION_TIMEOUT_SECONDS": "soon"})
    with pytest.raises(ConfigError, match="Set DEDUP_LEASE_SECONDS to at least 110"):
        DedupConfig.from_env({"DEDUP_FUNCTION_TIMEOUT_SECONDS": "100"})


class Lines(logging.Handler):
    """The delivery lines the "dedup" logger emits."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "outcome", None) is not None:
            self.records.append(record)


@pytest.fixture
def lines() -> Iterator[Lines]:
    """Every delivery line while the test runs."""
    handler = Lines()
    logger = logging.getLogger("dedup")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def message(message_id: str) -> CloudEvent:
    """A raw Pub/Sub CloudEvent, as the platform hands a firebase-functions function."""
    return CloudEvent(
        {
            "id": message_id,
            "source": "//pubsub.googleapis.com/projects/demo-exactly-once/topics/jobs",
            "type": "google.cloud.pubsub.topic.v1.messagePublished",
            "time": "2026-01-01T00:00:00Z",
        },
        {
            "message": {
                "messageId": message_id,
                "message_id": message_id,
                "publishTime": "2026-01-01T00:00:00Z",
                "publish_time": "2026-01-01T00:00:00Z",
                "attributes": {},
                "data": "aGk=",
            },
            "subscription": "s",
        },
    )


def declare(timeout: int, left: list[float], lease_seconds: int = 600) -> Any:
    """A Pub/Sub function declared inside this function (no module attribute holds it) with
    `timeout_sec=timeout`, under a lease of `lease_seconds`; its handler notes in `left` the
    time its delivery has left (`Delivery.time_left`)."""
    deduplicator = Deduplicator(DedupConfig(lease_seconds=lease_seconds), records=MemoryStore())

    @pubsub_fn.on_message_published(topic="jobs", timeout_sec=timeout)
    @trigger_once("budgetNested", deduplicator=deduplicator, registry=SuffixRegistry())
    def on_job(event: Any, delivery: Delivery) -> None:
        """No effect."""
        left.append(delivery.time_left() or 0.0)

    return on_job


def test_a_nested_function_runs_under_its_declared_timeout(lines: Lines) -> None:
    """The budget of each delivery of a function declared with `timeout_sec=20` under a lease
    of 600 s is 20 s (`budget_source` "declared_timeout"), not the lease's 590 s."""
    left: list[float] = []
    on_job = declare(20, left)
    for _ in range(2):
        on_job(message(uuid.uuid4().hex))
    assert [r.outcome for r in lines.records] == ["ran", "ran"]  # type: ignore[attr-defined]
    assert all(10 < seconds <= 20 for seconds in left), left  # 20 s less the margin
    assert {r.budget_source for r in lines.records} == {"declared_timeout"}  # type: ignore[attr-defined]


def test_on_the_platform_a_declared_timeout_the_lease_does_not_cover_is_refused(
    monkeypatch: pytest.MonkeyPatch, lines: Lines
) -> None:
    """`timeout_sec=700` under a lease of 600 s: on the platform each delivery raises the
    `ConfigError` that says what to set, and runs nothing; locally it runs, under the lease's
    bound (short leases are deliberate in tests)."""
    left: list[float] = []
    on_job = declare(700, left)
    on_job(message(uuid.uuid4().hex))
    assert [r.budget_source for r in lines.records] == ["lease"]  # type: ignore[attr-defined]
    assert 500 < left[0] <= 590, left
    refused = declare(700, left)
    monkeypatch.setenv("K_SERVICE", "on-job")
    for _ in range(2):
        with pytest.raises(ConfigError, match="Set DEDUP_LEASE_SECONDS to at least 710"):
            refused(message(uuid.uuid4().hex))
    assert len(lines.records) == len(left) == 1


def test_an_http_function_runs_under_its_declared_timeout() -> None:
    """`idempotent_http` under `https_fn.on_request(timeout_sec=20)`, lease 600 s: its
    request's delivery has 20 s (less the margin), not the lease's 590 s."""
    left: list[float] = []
    config = DedupConfig(lease_seconds=600, on_payload_mismatch="raise", cache_size=0)
    deduplicator = Deduplicator(config, records=MemoryStore())

    @https_fn.on_request(timeout_sec=20)
    @idempotent_http(
        "budgetHttp", anonymous=True, deduplicator=deduplicator, registry=SuffixRegistry()
    )
    def handle(call: IdempotentRequest) -> flask.Response:
        left.append(call.delivery.time_left() or 0.0)
        return flask.jsonify({"ok": True})

    app = flask.Flask("budget")
    headers = {"Idempotency-Key": uuid.uuid4().hex}
    with app.test_request_context("/", method="POST", json={"a": 1}, headers=headers):
        answer = handle(flask.request)
    assert answer.status_code == 200, answer.get_data()
    [seconds] = left
    assert 10 < seconds <= 20, seconds
