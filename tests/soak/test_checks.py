"""The soak's verdict catches every kind of broken effect (pure checks, no emulator)."""

from __future__ import annotations

from dedup import dedup_key
from soak.checks import Observed, RecordView, check, effects, unanswered_posts
from soak.functions import FUNCTIONS

EVENTS = ["order-1", "post-2"]


def clean(**changes: object) -> Observed:
    """An observation of two events whose every effect happened exactly once."""
    seen = Observed(
        events=list(EVENTS),
        counts={e: 1 for e in EVENTS},
        batches={e: 1 for e in EVENTS},
        notify_applied=[(dedup_key(e, "notify"), e, 1.0) for e in EVENTS],
        records=[
            RecordView(dedup_key(e, s), e, s, "sent", 1, False)
            for e in EVENTS
            for s in (f.suffix for f in FUNCTIONS)
        ],
        excused=[],
    )
    for name, value in changes.items():
        setattr(seen, name, value)
    return seen


def checks_of(seen: Observed) -> list[str]:
    return [v.check for v in check(seen)]


def test_exactly_once_everywhere_is_clean() -> None:
    """Every effect once, under its own key: no violation, 6 effects."""
    seen = clean()
    assert check(seen) == []
    assert effects(seen) == 6


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
