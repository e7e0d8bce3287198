"""`dedup.testing.deliver_until_done` retries as the platform does: it waits between
deliveries, long enough for a crashed delivery's lease to expire, and it raises, naming the
statuses, when it gives up instead of returning answers that were never 2xx."""

from __future__ import annotations

import uuid
from pathlib import Path

import functions_framework
import pytest
from google.cloud import firestore

from dedup import DedupConfig, Step, testing
from tests.dedup import until_done_app

APP = str(Path(__file__).with_name("until_done_app.py"))


class FakeTime:
    """A monotonic clock that only `sleep` moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_after_a_crash_it_waits_for_the_lease_and_the_next_delivery_finishes(
    firestore_client: firestore.Client,
) -> None:
    """On the Firestore emulator: a delivery dies before its step (`crash_at_step`), its
    lease held. `deliver_until_done`, given the function's config, keeps delivering, backing off,
    until the lease expired and a delivery takes it over: it ends with a 2xx, and the effect
    happened exactly once. The lease is 2 s of real time (leases are judged on the database's
    clock, which no test can move); the helper's patience is 5 s, so a slow machine only
    makes it deliver more often, never give up early."""
    event = testing.firestore_event(
        f"untilDone/{uuid.uuid4().hex}", None, {"total": 1}, change="created"
    )
    crash = testing.crash_at_step(until_done_app.on_created, event, step=1, at=Step.BEFORE_STEP)
    assert crash.died, crash.why
    app = functions_framework.create_app("on_created", APP, "cloudevent").test_client()
    target = testing.via_test_client(app)

    statuses = testing.deliver_until_done(target, event, config=until_done_app.CONFIG)

    assert 200 <= statuses[-1] < 300, statuses
    assert all(s == 500 for s in statuses[:-1]), statuses
    assert len(statuses) < 50, statuses
    key = f"{event.id}-tUntilDone"
    assert firestore_client.document(f"effects/{key}").get().get("n") == 1
    assert firestore_client.document(f"triggerEvents/{key}").get().get("state") == "sent"


def test_it_backs_off_and_raises_naming_the_statuses_when_it_gives_up() -> None:
    """A target that never answers 2xx: the waits double from 0.1 s, none longer than an eighth
    of the patience (twice the lease plus a second), and after the patience is spent it raises
    `DeliveryGaveUp` naming every status; time is a fake clock, so the test takes no time."""
    answers = iter([503, 500] * 100)
    fake = FakeTime()
    config = DedupConfig(lease_seconds=10)

    with pytest.raises(testing.DeliveryGaveUp) as gave_up:
        testing.deliver_until_done(
            lambda event: next(answers),
            testing.custom_event("t", {}),
            config=config,
            sleep=fake.sleep,
            clock=fake.clock,
        )

    error = gave_up.value
    assert error.patience == 21
    assert error.waited == pytest.approx(21)
    assert fake.sleeps[:4] == [0.1, 0.2, 0.4, 0.8]
    assert max(fake.sleeps) <= 21 / 8
    assert len(error.statuses) == len(fake.sleeps) + 1 < 50
    assert set(error.statuses) == {500, 503}
    for named in ("no 2xx answer", "503 x", "500 x"):
        assert named in str(error)


def test_a_limit_too_small_for_the_lease_is_named() -> None:
    """`limit` deliveries without a 2xx raise too, saying the limit ran out."""
    fake = FakeTime()
    with pytest.raises(testing.DeliveryGaveUp, match="limit=3 deliveries made") as gave_up:
        testing.deliver_until_done(
            lambda event: 429,
            testing.custom_event("t", {}),
            limit=3,
            config=DedupConfig(lease_seconds=60),
            sleep=fake.sleep,
            clock=fake.clock,
        )
    assert gave_up.value.statuses == [429, 429, 429]


def test_a_2xx_ends_it_at_once() -> None:
    """The first 2xx is the last status: nothing is delivered after it, nothing waited for."""
    answers = iter([500, 204, 500])
    fake = FakeTime()
    statuses = testing.deliver_until_done(
        lambda event: next(answers),
        testing.custom_event("t", {}),
        config=DedupConfig(),
        sleep=fake.sleep,
        clock=fake.clock,
    )
    assert statuses == [500, 204]
    assert fake.sleeps == [0.1]
