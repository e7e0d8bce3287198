"""The soak's verdict catches every kind of broken effect, and its drain waits out the last
death (pure checks and a pure drain rule on a made-up clock, no emulator)."""

from __future__ import annotations

from dedup import dedup_key
from soak.checks import (
    CHECKS,
    Observed,
    RecordView,
    check,
    effects,
    effects_by_function,
    unanswered_posts,
)
from soak.drain import POLL_SECONDS, Drain, Ended, wait_for
from soak.functions import FUNCTIONS

EVENTS = ["order-1", "post-2"]
DONE_STEPS = {"count": "done", "post": "done", "receipt": "done"}


def step_post(event: str) -> tuple[str, str]:
    """The keyed step's POST of `event`, under its one key."""
    return f"{dedup_key(event, 'steps')}/post", event


def record(
    event: str, suffix: str, state: str = "sent", steps: dict[str, str] | None = None
) -> RecordView:
    """The record of (`event`, `suffix`); the `steps` function's holds its steps, all done."""
    if steps is None:
        steps = DONE_STEPS if suffix == "steps" else {}
    return RecordView(dedup_key(event, suffix), event, suffix, state, 1, False, steps=steps)


def clean(**changes: object) -> Observed:
    """An observation of two events whose every effect happened exactly once."""
    seen = Observed(
        events=list(EVENTS),
        counts={e: 1 for e in EVENTS},
        batches={e: 1 for e in EVENTS},
        notify_applied=[(dedup_key(e, "notify"), e, 1.0) for e in EVENTS],
        step_counts={e: 1 for e in EVENTS},
        step_posts=[step_post(e) for e in EVENTS],
        receipts=list(EVENTS),
        records=[record(e, s) for e in EVENTS for s in (f.suffix for f in FUNCTIONS)],
        excused=[],
    )
    for name, value in changes.items():
        setattr(seen, name, value)
    return seen


def checks_of(seen: Observed) -> list[str]:
    names = [v.check for v in check(seen)]
    assert set(names) <= set(CHECKS), names
    return names


def test_exactly_once_everywhere_is_clean() -> None:
    """Every effect once, under its own key: no violation, 12 effects (6 per event)."""
    seen = clean()
    assert check(seen) == []
    assert effects(seen) == 12
    assert effects_by_function(seen) == {
        "notify": 2,
        "count": 2,
        "batch_count": 2,
        "steps.count": 2,
        "steps.post": 2,
        "steps.receipt": 2,
    }


def test_a_step_transaction_applied_twice_or_lost_is_a_violation() -> None:
    """The `steps` function's transactional step moves its counter exactly once."""
    violations = check(clean(step_counts={"order-1": 2}))
    assert [(v.check, v.event_id, v.function) for v in violations] == [
        ("step transaction effect", "order-1", "steps"),
        ("step transaction effect", "post-2", "steps"),
    ]
    assert "applied 2 times" in violations[0].detail
    assert "lost" in violations[1].detail


def test_a_keyed_step_repeated_under_its_key_is_fine_under_another_key_or_lost_is_not() -> None:
    """A keyed step is at least once under its one key: a repeat under that key is what an
    idempotent receiver keeps once; a second key, or no POST applied, is a violation."""
    repeated = [*clean().step_posts, step_post("order-1")]
    assert check(clean(step_posts=repeated)) == []
    other_key = [*clean().step_posts, (dedup_key("order-1", "notify"), "order-1")]
    assert checks_of(clean(step_posts=other_key)) == ["step keyed effect"]
    lost = [step_post("post-2")]
    violations = check(clean(step_posts=lost))
    assert [(v.check, v.event_id) for v in violations] == [("step keyed effect", "order-1")]
    assert "lost" in violations[0].detail


def test_an_at_most_once_step_applied_twice_is_a_violation() -> None:
    """Never twice, counted from the receiver: a second receipt of one event breaks it, even
    when the record says the step was interrupted."""
    twice = [*EVENTS, "order-1"]
    violations = check(clean(receipts=twice))
    assert [(v.check, v.event_id) for v in violations] == [("at-most-once effect", "order-1")]
    assert "applied 2 times" in violations[0].detail
    records = clean().records
    records[3] = record("order-1", "steps", steps={**DONE_STEPS, "receipt": "started"})
    assert checks_of(clean(receipts=twice, records=records)) == ["at-most-once effect"]


def test_an_interrupted_at_most_once_step_is_fine_with_or_without_its_receipt() -> None:
    """A step started and never ended (a crash after the call, a failed call) may have been
    applied once or not at all: the handler skipped it, nothing is wrong."""
    records = clean().records
    records[3] = record("order-1", "steps", steps={**DONE_STEPS, "receipt": "started"})
    assert check(clean(records=records, skipped={"order-1"})) == []
    assert check(clean(records=records, receipts=["post-2"], skipped={"order-1"})) == []


def test_an_at_most_once_step_must_agree_with_its_record() -> None:
    """Applied without a recorded start (called before it), recorded done and never applied,
    or a `sent` record whose delivery never reached the step: each is a violation."""
    records = clean().records
    no_receipt = {"count": "done", "post": "done"}
    records[3] = record("order-1", "steps", steps=no_receipt)
    seen = clean(records=records, receipts=["order-1", "post-2"])
    assert [v.detail for v in check(seen)] == [
        "applied, but its record holds no start of the step: called before its start"
    ]
    assert [v.detail for v in check(clean(receipts=["post-2"]))] == [
        "recorded done, but never applied"
    ]
    seen = clean(records=records, receipts=["post-2"])
    assert [v.detail for v in check(seen)] == ["the record is sent, but the step was never started"]
    records[3] = record("order-1", "steps", state="in_progress", steps=no_receipt)
    assert check(clean(records=records, receipts=["post-2"])) == []  # not finished yet


def test_a_transactional_effect_applied_twice_or_lost_is_a_violation() -> None:
    """A counter at 2 (repeated) or absent (lost) breaks exactly-once."""
    violations = check(clean(counts={"order-1": 2}, batches={"order-1": 1, "post-2": 1}))
    assert [(v.check, v.event_id) for v in violations] == [
        ("transaction effect", "order-1"),
        ("transaction effect", "post-2"),
    ]
    assert "applied 2 times" in violations[0].detail
    assert "lost" in violations[1].detail


def test_a_keyed_effect_under_a_second_key_or_never_applied_is_a_violation() -> None:
    """The receiver must have applied each event under its one key, and at least once."""
    applied = [(dedup_key("order-1", "notify"), "order-1", 1.0), ("other-key", "order-1", 2.0)]
    assert checks_of(clean(notify_applied=applied)) == ["keyed effect", "keyed effect"]


def test_a_repeat_is_excused_only_by_a_crash_or_a_restart_while_it_was_sent() -> None:
    """The same key sent twice is the documented crash window, and nothing else: the first
    POST must have arrived during a delivery that was killed (or met a restart)."""
    twice = [*clean().notify_applied, (dedup_key("order-1", "notify"), "order-1", 5.0)]
    assert checks_of(clean(notify_applied=twice)) == ["repeated without a crash"]
    killed_later = [("order-1", 2.0, 3.0)]
    assert checks_of(clean(notify_applied=twice, excused=killed_later)) == [
        "repeated without a crash"
    ]
    killed_other_event = [("post-2", 0.5, 1.5)]
    assert checks_of(clean(notify_applied=twice, excused=killed_other_event)) == [
        "repeated without a crash"
    ]
    assert check(clean(notify_applied=twice, excused=[("order-1", 0.5, 1.5)])) == []


def test_a_repeat_is_excused_when_the_first_answer_never_reached_its_sender() -> None:
    """The receiver applied a POST whose sender saw a timeout or a dropped connection: its
    retry sends the same key again (an idempotent receiver keeps one). That excuses that one
    repeat, and only for that event."""
    twice = [*clean().notify_applied, (dedup_key("order-1", "notify"), "order-1", 5.0)]
    assert check(clean(notify_applied=twice, unanswered=[("order-1", 1.0)])) == []
    assert checks_of(clean(notify_applied=twice, unanswered=[("post-2", 1.0)])) == [
        "repeated without a crash"
    ]
    assert checks_of(clean(notify_applied=twice, unanswered=[("order-1", 5.0)])) == [
        "repeated without a crash"
    ], "the last POST's lost answer explains no earlier one"
    thrice = [*twice, (dedup_key("order-1", "notify"), "order-1", 9.0)]
    assert checks_of(clean(notify_applied=thrice, unanswered=[("order-1", 1.0)])) == [
        "repeated without a crash"
    ]


def test_a_post_whose_sender_died_before_the_answer_counts_as_unanswered() -> None:
    """A POST logged as sent and never answered: its process was SIGKILLed before the answer
    (the receiver may read it after the driver saw the process die). A POST whose answer its
    handler got, 2xx or not, is never excused that way."""
    posts = "sent a\nanswered a\nsent b\nsent c\nsent d\nanswered d\n"
    assert unanswered_posts(posts, "c\n") == {"b", "c"}
    assert unanswered_posts("", "") == set()
    assert unanswered_posts("sent a\nanswered a\n", "") == set()


def test_a_stuck_lease_too_many_attempts_and_unacknowledged_deliveries_are_violations() -> None:
    """Records must end final or released, within max_attempts + concurrency, all acked."""
    records = clean().records
    records[0] = RecordView(records[0].key, "order-1", "notify", "in_progress", 1, True)
    records[1] = RecordView(records[1].key, "order-1", "count", "sent", 14, False, 600.0)
    seen = clean(records=records, unacknowledged=[("post-2", "count", "LeaseHeld")])
    assert checks_of(seen) == ["in_progress past its lease", "attempts", "not acknowledged"]


def test_a_record_written_for_another_event_is_a_violation() -> None:
    """A record at an event's key must belong to that (event id, suffix)."""
    records = clean().records
    key = dedup_key("order-1", "count")
    records[1] = RecordView(key, "order-1-x", "count", "sent", 1, False)
    violations = check(clean(records=records))
    assert [(v.check, v.event_id, v.function) for v in violations] == [
        ("record of another event", "order-1", "count")
    ]
    assert "'order-1-x'" in violations[0].detail


def test_many_attempts_young_are_fine_and_dead_too_soon_is_a_violation() -> None:
    """Attempts above the bound within min_retry_seconds are what fast redeliveries spend (no
    violation); a record dead before max_attempts attempts over min_retry_seconds is one."""
    records = clean().records
    records[0] = RecordView(records[0].key, "order-1", "notify", "in_progress", 40, False, 30.0)
    records[1] = RecordView(records[1].key, "order-1", "count", "dead", 12, False, 30.0)
    assert checks_of(clean(records=records)) == ["dead too soon"]
    records[1] = RecordView(records[1].key, "order-1", "count", "dead", 12, False, 600.0)
    assert checks_of(clean(records=records)) == []


START = 1000.0


class Platform:
    """A made-up clock for `soak.drain.wait_for`: process deaths at given seconds after the
    drain's start, and one copy of `order-1` (count) acknowledged at `acknowledged_at` (None:
    never)."""

    def __init__(self, drain: Drain, deaths: list[float], acknowledged_at: float | None) -> None:
        self.drain = drain
        self.now = START
        self.deaths = sorted(deaths)
        self.acknowledged_at = acknowledged_at

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        before, self.now = self.now, self.now + seconds
        for death in self.deaths:
            if before < START + death <= self.now:
                self.drain.death(START + death)

    def unacknowledged(self) -> int:
        done = self.acknowledged_at is not None and self.now >= START + self.acknowledged_at
        return 0 if done else 1

    def observed(self) -> Observed:
        """What the checks see once the drain ended: the copy, if still unacknowledged."""
        left = [("order-1", "count", "LeaseHeld")] if self.unacknowledged() else []
        return clean(unacknowledged=left)


def drained(deaths: list[float], acknowledged_at: float | None) -> tuple[Ended, float, Platform]:
    """Run the drain rule (90 s, cap 600 s) on the made-up platform."""
    platform = Platform(Drain(90, 600), deaths, acknowledged_at)
    why, took = wait_for(
        platform.drain, platform.unacknowledged, clock=platform.clock, sleep=platform.sleep
    )
    return why, took, platform


def test_the_drain_ends_when_every_copy_is_acknowledged() -> None:
    """A drain whose copies are all acknowledged ends then, well before 90 s, with no death."""
    why, took, platform = drained([], acknowledged_at=12)
    assert (why, platform.drain.deaths) == (Ended.ACKNOWLEDGED, 0)
    assert 12 <= took < 12 + 2 * POLL_SECONDS
    assert check(platform.observed()) == []


def test_a_death_in_the_drain_extends_it() -> None:
    """A copy that waits out a lock left by a process death 38 s into the drain (acknowledged
    at 120 s) is acknowledged: the drain ends 90 s after the last death (128 s), not 90 s
    after its start. Without that death the same copy is `not acknowledged` at 90 s."""
    why, took, platform = drained([38.0], acknowledged_at=120)
    assert (why, platform.drain.deaths, platform.drain.ends_at()) == (
        Ended.ACKNOWLEDGED,
        1,
        START + 128,
    )
    assert 120 <= took < 120 + 2 * POLL_SECONDS
    assert check(platform.observed()) == []

    why, took, platform = drained([], acknowledged_at=120)
    assert why is Ended.QUIET
    assert 90 <= took < 90 + 2 * POLL_SECONDS
    assert checks_of(platform.observed()) == ["not acknowledged"]


def test_a_death_before_the_drain_does_not_extend_it() -> None:
    """Only deaths after the drain's start count: one reported before it moves nothing."""
    drain = Drain(90, 600)
    drain.death(START - 5)
    drain.start(START)
    drain.death(START - 1)
    assert (drain.deaths, drain.ends_at()) == (0, START + 90)
    drain.death(START + 30)
    assert (drain.deaths, drain.ends_at()) == (1, START + 120)


def test_the_cap_ends_the_drain_with_not_acknowledged() -> None:
    """Deaths every 60 s renew the wait forever: the cap (600 s) ends the drain anyway, and
    the copy still waiting is `not acknowledged`."""
    why, took, platform = drained([60.0 * i for i in range(1, 20)], acknowledged_at=None)
    assert why is Ended.CAP
    assert 600 <= took < 600 + 2 * POLL_SECONDS
    assert platform.drain.deaths == 10  # at 60, 120, ... 600 s: the last one at the cap
    assert checks_of(platform.observed()) == ["not acknowledged"]
