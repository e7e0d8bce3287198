"""The ambiguous delivery, on the in-memory store: the decision (`dedup.kernel.claims`), what each
choice writes, `delivery.note` and its cost. No emulator: a crash is a `BaseException` that
nothing of the library handles (the process dying), and the store's clock expires leases.
The emulator tests with real SIGKILLs and store outages are in test_ambiguity_crash.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dedup import (
    AsyncDeduplicator,
    ConfigError,
    DedupConfig,
    Deduplicator,
    Delivery,
    LeaseLost,
    Mode,
    OutcomeKind,
    Record,
    State,
    trigger_once,
)
from dedup.entrances.suffixes import SuffixRegistry
from dedup.kernel.claims import (
    AfterAmbiguity,
    AttemptLimit,
    Claim,
    after_ambiguity,
    decide,
    takeover_ambiguous,
)
from dedup.kernel.delivery import Step
from dedup.kernel.transitions import dedup_key, revived
from tests.matrix.kinds import Crash
from tests.memory_store import AsyncMemoryStore, MemoryStore

SUFFIX = "s"
EVENT = "e1"
KEY = dedup_key(EVENT, SUFFIX)
LEASE = 30


class World:
    """One store (the database), a receiver that counts every call, and instances on it."""

    def __init__(self) -> None:
        self.store = MemoryStore("triggerEvents", rpc_timeout_seconds=1)
        self.effects: list[str] = []
        """The receiver: one entry per call, never deduplicated."""

    @property
    def record(self) -> Record | None:
        return Record.from_snapshot(self.store.document(self.store.path(KEY)))

    def instance(self, max_attempts: int = 5) -> Deduplicator:
        config = DedupConfig(
            lease_seconds=LEASE, cache_size=0, max_attempts=max_attempts, min_retry_seconds=0
        )
        return Deduplicator(config, records=self.store.instance())

    def handler(self, delivery: Delivery) -> None:
        self.effects.append(delivery.key)

    def crash_after_effect(self, max_attempts: int = 5) -> None:
        """One delivery produces the effect, then its process dies before "sent"."""
        dying = self.instance(max_attempts)

        def die(step: Step, key: str) -> None:
            if step is Step.AFTER_EFFECT:
                raise Crash

        dying.on_step(die)
        with pytest.raises(Crash):
            dying.run(EVENT, SUFFIX, self.handler)
        self.store.clock.advance(LEASE + 1)

    def asks(self, answer: bool | None) -> Callable[[Delivery], bool | None]:
        """A reconcile that records each question and answers `answer`."""
        self.asked: list[Delivery] = []

        def reconcile(delivery: Delivery) -> bool | None:
            self.asked.append(delivery)
            return answer

        return reconcile


# --- the decision -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verdict", "on_ambiguous", "after"),
    [
        (True, "rerun", AfterAmbiguity.RECONCILED),
        (True, "skip", AfterAmbiguity.RECONCILED),
        (False, "rerun", AfterAmbiguity.RUN),
        (False, "skip", AfterAmbiguity.RUN),
        (None, "rerun", AfterAmbiguity.RUN),
        (None, "skip", AfterAmbiguity.SKIP),
    ],
)
def test_the_decision_table(verdict: bool | None, on_ambiguous: str, after: AfterAmbiguity) -> None:
    """reconcile's answer first; on None (or no reconcile) on_ambiguous decides."""
    assert after_ambiguity(verdict, on_ambiguous) is after


def test_only_an_expired_lease_is_ambiguous() -> None:
    """An expired lease is ambiguous; a released one (the handler raised) and a live one are
    not; an unknown record is final (skipped like a duplicate)."""
    now = datetime(2026, 1, 1, tzinfo=UTC)

    def record(state: State, started: datetime | None) -> Record:
        return Record(
            key=KEY, event_id=EVENT, suffix=SUFFIX, state=state, sent=False, owner="o",
            lease_started_at=started, lease_seconds=LEASE, attempts=1, first_attempt_at=None,
            last_attempt_at=None, sent_at=None, expire_at=None, last_error=None,
            payload_hash=None, mode=Mode.LEASE,
        )  # fmt: skip

    expired = record(State.IN_PROGRESS, now - timedelta(seconds=LEASE + 1))
    released = record(State.IN_PROGRESS, None)
    live = record(State.IN_PROGRESS, now)
    assert takeover_ambiguous(expired, now)
    assert decide(expired, now, AttemptLimit(5)) is Claim.TAKE_OVER
    assert not takeover_ambiguous(released, now)
    assert decide(released, now, AttemptLimit(5)) is Claim.TAKE_OVER
    assert not takeover_ambiguous(live, now)
    assert decide(record(State.UNKNOWN, None), now, AttemptLimit(5)) is Claim.SKIP


# --- what each choice does --------------------------------------------------------------------


def test_by_default_the_handler_runs_again_with_the_same_key() -> None:
    """rerun (the default): two effects under one key, the record sent."""
    world = World()
    world.crash_after_effect()
    outcome = world.instance().run(EVENT, SUFFIX, world.handler)
    assert outcome.kind is OutcomeKind.RAN
    assert world.effects == [KEY, KEY]
    assert world.record is not None
    assert world.record.state is State.SENT


def test_skip_ends_unknown_and_never_runs_again(caplog: pytest.LogCaptureFixture) -> None:
    """skip: at most once. The record ends unknown, the delivery returns (acknowledged) with
    the outcome ambiguous and a WARNING line saying so, and later deliveries are duplicates."""
    world = World()
    world.crash_after_effect()
    with caplog.at_level(logging.INFO, logger="dedup"):
        outcome = world.instance().run(EVENT, SUFFIX, world.handler, on_ambiguous="skip")
    assert outcome.kind is OutcomeKind.AMBIGUOUS
    [line] = [r for r in caplog.records if r.getMessage().startswith("ambiguous:")]
    assert line.levelno == logging.WARNING
    assert "not run again" in line.getMessage()
    assert "dedup revive" in line.getMessage()
    assert world.effects == [KEY]
    record = world.record
    assert record is not None
    assert (record.state, record.sent, record.has_lease) == (State.UNKNOWN, False, False)
    again = world.instance().run(EVENT, SUFFIX, world.handler, on_ambiguous="skip")
    assert again.kind is OutcomeKind.DUPLICATE
    assert world.effects == [KEY]


def test_reconcile_true_records_sent_without_running_the_handler() -> None:
    """reconcile says the effect happened: sent, reconciled, exactly one effect."""
    world = World()
    world.crash_after_effect()
    outcome = world.instance().run(EVENT, SUFFIX, world.handler, reconcile=world.asks(True))
    assert outcome.kind is OutcomeKind.RECONCILED
    assert world.effects == [KEY]
    record = world.record
    assert record is not None
    assert (record.state, record.reconciled, record.has_lease) == (State.SENT, True, False)
    assert [d.key for d in world.asked] == [KEY]
    assert world.asked[0].attempt == 2


@pytest.mark.parametrize(
    ("answer", "kind", "state"),
    [
        (True, OutcomeKind.RECONCILED, State.SENT),
        (False, OutcomeKind.DEAD, State.DEAD),
        (None, OutcomeKind.DEAD, State.DEAD),
    ],
)
def test_the_last_allowed_attempt_is_reconciled_before_it_is_buried(
    answer: bool | None, kind: OutcomeKind, state: State
) -> None:
    """No attempt is left to run the handler (max_attempts=1), but reconcile is still asked:
    an effect it finds is recorded sent, not buried dead; otherwise the event is buried."""
    world = World()
    world.crash_after_effect(max_attempts=1)
    outcome = world.instance(max_attempts=1).run(
        EVENT, SUFFIX, world.handler, reconcile=world.asks(answer)
    )
    assert outcome.kind is kind
    assert world.effects == [KEY]
    assert [d.key for d in world.asked] == [KEY]
    record = world.record
    assert record is not None
    assert (record.state, record.reconciled, record.has_lease) == (state, answer is True, False)


@pytest.mark.parametrize("on_ambiguous", ["rerun", "skip"])
def test_reconcile_false_runs_the_handler(on_ambiguous: str) -> None:
    """reconcile says it did not happen: the handler runs, whatever on_ambiguous says."""
    world = World()
    world.crash_after_effect()
    run = world.instance().run
    outcome = run(
        EVENT, SUFFIX, world.handler, reconcile=world.asks(False), on_ambiguous=on_ambiguous
    )
    assert outcome.kind is OutcomeKind.RAN
    assert world.effects == [KEY, KEY]
    assert world.record is not None
    assert not world.record.reconciled


@pytest.mark.parametrize(
    ("on_ambiguous", "effects", "state"), [("rerun", 2, State.SENT), ("skip", 1, State.UNKNOWN)]
)
def test_reconcile_none_leaves_it_to_on_ambiguous(
    on_ambiguous: str, effects: int, state: State
) -> None:
    """reconcile cannot tell: on_ambiguous decides."""
    world = World()
    world.crash_after_effect()
    run = world.instance().run
    run(EVENT, SUFFIX, world.handler, reconcile=world.asks(None), on_ambiguous=on_ambiguous)
    assert len(world.effects) == effects
    assert world.record is not None
    assert world.record.state is state


def test_a_fresh_event_and_a_released_lease_are_never_ambiguous() -> None:
    """reconcile is not asked on a fresh event, nor after a handler that raised released its
    lease: the handler runs."""
    world = World()
    reconcile = world.asks(True)
    outcome = world.instance().run(
        EVENT, SUFFIX, world.handler, reconcile=reconcile, on_ambiguous="skip"
    )
    assert outcome.kind is OutcomeKind.RAN
    assert world.asked == []

    other = World()
    reconcile = other.asks(True)

    def fails(delivery: Delivery) -> None:
        other.effects.append(delivery.key)
        raise RuntimeError("downstream 503")

    with pytest.raises(RuntimeError):
        other.instance().run(EVENT, SUFFIX, fails)
    other.store.clock.advance(LEASE + 1)
    outcome = other.instance().run(
        EVENT, SUFFIX, other.handler, reconcile=reconcile, on_ambiguous="skip"
    )
    assert outcome.kind is OutcomeKind.RAN
    assert other.asked == []
    assert other.effects == [KEY, KEY]


def test_a_reconcile_that_raises_keeps_the_lease_and_is_asked_again() -> None:
    """reconcile failing writes nothing: the lease expires and the next delivery is
    ambiguous again (not a silent rerun)."""
    world = World()
    world.crash_after_effect()

    def broken(delivery: Delivery) -> bool | None:
        raise OSError("receiver unreachable")

    with pytest.raises(OSError, match="unreachable"):
        world.instance().run(EVENT, SUFFIX, world.handler, reconcile=broken)
    record = world.record
    assert record is not None
    assert record.state is State.IN_PROGRESS
    assert record.has_lease
    world.store.clock.advance(LEASE + 1)
    outcome = world.instance().run(EVENT, SUFFIX, world.handler, reconcile=world.asks(True))
    assert outcome.kind is OutcomeKind.RECONCILED
    assert world.effects == [KEY]


def test_a_reconcile_answer_that_is_not_a_bool_is_refused() -> None:
    world = World()
    world.crash_after_effect()
    with pytest.raises(ConfigError, match="must return True"):
        world.instance().run(EVENT, SUFFIX, world.handler, reconcile=lambda d: "yes")  # type: ignore[arg-type]
    assert world.effects == [KEY]


def test_revive_makes_an_unknown_record_run_the_handler() -> None:
    """`dedup revive`'s write hands an unknown record back: the next delivery is not
    ambiguous (a released lease) and runs the handler, even under skip."""
    world = World()
    world.crash_after_effect()
    world.instance().run(EVENT, SUFFIX, world.handler, on_ambiguous="skip")
    path = world.store.path(KEY)
    document = world.store.document(path)
    assert document.data is not None
    world.store.put(path, {**document.data, **revived()})
    outcome = world.instance().run(EVENT, SUFFIX, world.handler, on_ambiguous="skip")
    assert outcome.kind is OutcomeKind.RAN
    assert world.effects == [KEY, KEY]


# --- notes ------------------------------------------------------------------------------------


def test_notes_reach_the_next_attempt_and_its_reconcile() -> None:
    """What the crashed attempt noted before its effect is what reconcile and the taking-over
    delivery see; a fresh delivery sees none."""
    world = World()
    seen: list[dict[str, Any]] = []

    def handler(delivery: Delivery) -> None:
        seen.append(dict(delivery.notes))
        delivery.note(message_id=f"m-{delivery.attempt}")
        world.effects.append(delivery.notes["message_id"])

    dying = world.instance()
    dying.on_step(
        lambda step, key: (_ for _ in ()).throw(Crash) if step is Step.AFTER_EFFECT else None
    )
    with pytest.raises(Crash):
        dying.run(EVENT, SUFFIX, handler)
    world.store.clock.advance(LEASE + 1)

    def reconcile(delivery: Delivery) -> bool | None:
        return delivery.notes.get("message_id") in world.effects

    outcome = world.instance().run(EVENT, SUFFIX, handler, reconcile=reconcile)
    assert outcome.kind is OutcomeKind.RECONCILED
    assert seen == [{}]
    assert world.effects == ["m-1"]
    assert world.record is not None
    assert world.record.notes == {"message_id": "m-1"}


def test_a_handler_that_notes_nothing_costs_what_it_cost_before() -> None:
    """Two commits (claim, sent) without notes; one more for a handler that notes."""
    world = World()
    world.instance().run(EVENT, SUFFIX, world.handler)
    assert dict(world.store.calls) == {"Commit": 2}

    noting = World()
    noting.instance().run(EVENT, SUFFIX, lambda d: d.note(ref="r1"))
    assert noting.store.calls["Commit"] == 3
    record = noting.record
    assert record is not None
    assert record.state is State.SENT
    assert record.notes == {"ref": "r1"}


def test_a_note_is_fenced_by_the_lease() -> None:
    """A delivery whose lease was taken over cannot write notes: LeaseLost, as "sent" would."""
    world = World()
    stale = world.instance()

    def outlives_its_lease(delivery: Delivery) -> None:
        world.store.clock.advance(LEASE + 1)
        world.instance().run(EVENT, SUFFIX, world.handler)  # another instance takes over
        delivery.note(ref="late")

    with pytest.raises(LeaseLost):
        stale.run(EVENT, SUFFIX, outlives_its_lease)
    record = world.record
    assert record is not None
    assert record.state is State.SENT
    assert record.notes is None


def test_notes_serve_lease_mode_only() -> None:
    world = World()
    with pytest.raises(ConfigError, match="lease mode only"):
        world.instance().run(EVENT, SUFFIX, lambda d: d.note(x=1), mode=Mode.TRANSACTION)


# --- the async path ---------------------------------------------------------------------------


def test_the_async_path_reconciles_with_an_async_reconcile_and_notes() -> None:
    """The same decision on the async path: async reconcile awaited, notes awaited."""
    world = World()
    effects: list[str] = []

    async def handler(delivery: Any) -> None:
        await delivery.note(message_id="m1")
        effects.append(delivery.notes["message_id"])

    async def reconcile(delivery: Any) -> bool | None:
        return delivery.notes.get("message_id") in effects

    def instance() -> AsyncDeduplicator:
        config = DedupConfig(lease_seconds=LEASE, cache_size=0)
        return AsyncDeduplicator(config, records=AsyncMemoryStore(world.store))

    async def scenario() -> None:
        dying = instance()

        def die(step: Step, key: str) -> None:
            if step is Step.AFTER_EFFECT:
                raise Crash

        dying.on_step(die)
        with pytest.raises(Crash):
            await dying.run(EVENT, SUFFIX, handler)
        world.store.clock.advance(LEASE + 1)
        outcome = await instance().run(EVENT, SUFFIX, handler, reconcile=reconcile)
        assert outcome.kind is OutcomeKind.RECONCILED

    asyncio.run(scenario())
    assert effects == ["m1"]
    assert world.record is not None
    assert world.record.reconciled


# --- checked at import ------------------------------------------------------------------------


def test_the_entrances_check_the_choice_at_import() -> None:
    """An unknown on_ambiguous, a reconcile that is not callable, and an async reconcile for a
    def handler are refused with ConfigError naming the function."""
    registry = SuffixRegistry()
    with pytest.raises(ConfigError, match=r"trigger_once\('notify'\).*on_ambiguous='never'"):
        trigger_once("notify", on_ambiguous="never", registry=registry)
    with pytest.raises(ConfigError, match=r"trigger_once\('notify'\).*not callable"):
        trigger_once("notify", reconcile=True, registry=registry)  # type: ignore[arg-type]

    async def asks(delivery: Any) -> bool:
        return True

    def notify(event: Any, delivery: Delivery) -> None: ...

    with pytest.raises(ConfigError, match=r"notify.*reconcile is an async function"):
        trigger_once("notify", reconcile=asks, registry=registry)(notify)
    with pytest.raises(ConfigError):
        Deduplicator(DedupConfig(), records=MemoryStore()).run(
            EVENT, SUFFIX, lambda d: None, on_ambiguous="no"
        )
