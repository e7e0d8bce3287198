"""Red-team holes in the lease flow's claim, take-over and give-back, each closed.

A slow database and an operator were set against exactly-once through the public API, on the
Firestore emulator, with short leases: a delivery that took over an expired lease and gave it
back unstarted (its take-over slow), or an operator's `dedup release`, erased the ambiguity of
an effect that had landed, and the next delivery ran it again under `on_ambiguous="skip"`; a
claim that landed while its response was lost was left to expire, so the next delivery found it
ambiguous although no handler had ever run. Every test states the invariant it proves and
fails on the code before the fix, except those marked as guarding the class (their holes were
looked for and not found).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest
from click.testing import CliRunner
from google.cloud import firestore
from google.cloud.firestore import AsyncClient

from dedup import (
    AsyncDeduplicator,
    AsyncDelivery,
    DedupConfig,
    Deduplicator,
    Delivery,
    Mode,
    OutcomeKind,
    Record,
    State,
    StoreUnavailable,
)
from dedup.cli import cli
from dedup.kernel.claims import AttemptLimit, Claim, decide, takeover_ambiguous
from dedup.kernel.delivery import Step
from tests.dedup.aio_faults import AsyncFaultInterceptor, FaultyAsyncClient
from tests.dedup.grpc_faults import (
    PROJECT,
    Fault,
    FaultInterceptor,
    FaultyClient,
    _InjectedError,
)

ReadRecord = Callable[[str], Record | None]
EVENT, SUFFIX, KEY = "e1", "s", "e1-s"
EFFECTS = "effects"
CRASHED_LEASE = 3
"""The lease of the attempt that produces the effect and dies (seconds)."""
SLOW_LEASE = 8
"""The lease of the delivery whose take-over is slow: its budget is 7 s (lease less the RPC
timeout), which ends 0.7 s early (`Budget.of_delivery`); its writes after that may use 0.5 s
more."""


class Crash(BaseException):
    """The process dies (raised from a step hook, as in tests/dedup/test_ambiguity.py)."""


class Weather(FaultInterceptor, grpc.UnaryStreamClientInterceptor):
    """The faults of `grpc_faults` (by `plan`), and two more a test sets as it goes: a write
    applied whose response is held until a monotonic time (`hold`: a slow write), and an outage
    in which every call, reads included, fails UNAVAILABLE without being applied (`down`)."""

    def __init__(self, plan: Callable[[str, int], Fault] = lambda method, n: Fault.PASS) -> None:
        super().__init__(plan)
        self.hold: dict[tuple[str, int], float] = {}
        """(method, call number) -> when its response reaches the client (monotonic)."""
        self.down_after: dict[tuple[str, int], float] = {}
        """(method, call number) -> seconds the store is down after that call is applied."""
        self.down_until = 0.0

    def down(self) -> bool:
        """The store is unreachable now."""
        return time.monotonic() < self.down_until

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        method = str(details.method).rsplit("/", 1)[-1]
        if self.down():
            return _InjectedError(grpc.StatusCode.UNAVAILABLE, "injected: store down")
        number = self.calls[method] + 1
        answer = super().intercept_unary_unary(continuation, details, request)
        if (method, number) in self.down_after:
            self.down_until = time.monotonic() + self.down_after[(method, number)]
        if (method, number) in self.hold:
            answer.exception()  # applied (or failed) first, then answered late
            time.sleep(max(0.0, self.hold[(method, number)] - time.monotonic()))
        return answer

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        if self.down():
            return _FailedStream(grpc.StatusCode.UNAVAILABLE, "injected: store down")
        return continuation(details, request)


class _FailedStream(_InjectedError):
    """A streaming call (a document read) that fails at its first response."""

    def __iter__(self) -> _FailedStream:
        return self

    def __next__(self) -> Any:
        raise self


def dedup_on(weather: Weather, **settings: Any) -> Deduplicator:
    """A Deduplicator whose client goes through `weather` (no cache, no retry delay)."""
    config = DedupConfig(cache_size=0, min_retry_seconds=0, rpc_timeout_seconds=1, **settings)
    return Deduplicator(config, client=FaultyClient(weather))


def effect(delivery: Delivery) -> None:
    """The handler: one document in `effects` per run, never deduplicated."""
    delivery.client.collection(EFFECTS).document().create({"key": delivery.key})


def effects(client: firestore.Client) -> int:
    """How many times the handler's effect happened."""
    return sum(1 for _ in client.collection(EFFECTS).list_documents())


def crash_after_effect(client: firestore.Client) -> None:
    """Delivery A runs the handler, whose effect lands, and its process dies before "sent"."""
    dying = Deduplicator(
        DedupConfig(lease_seconds=CRASHED_LEASE, rpc_timeout_seconds=1, cache_size=0),
        client=client,
    )

    def die(step: Step, key: str) -> None:
        if step is Step.AFTER_EFFECT:
            raise Crash

    dying.on_step(die)
    with pytest.raises(Crash):
        dying.run(EVENT, SUFFIX, effect)


def past_the_budget() -> float:
    """When the response of a write made by a delivery starting now, under `SLOW_LEASE`, comes
    too late to start the handler (its budget ended at 6.3 s) and still leaves its give-back
    time (until 6.8 s)."""
    return time.monotonic() + SLOW_LEASE - 1.55


def show(client: firestore.Client, key: str) -> dict[str, Any]:
    """`dedup show KEY --json`, as an operator runs it."""
    shown = CliRunner().invoke(cli, ["--project", client.project, "show", key, "--json"])
    assert shown.exit_code == 0, shown.output
    return dict(json.loads(shown.output))


def slow_take_over_given_back(weather: Weather) -> None:
    """Delivery B takes the expired lease over (an ambiguous take-over), but its take-over
    write is slow: its response arrives after B's time budget, so B gives the lease back
    without starting the handler."""
    late = dedup_on(weather, lease_seconds=SLOW_LEASE)
    weather.hold[("Commit", 2)] = past_the_budget()  # its create (1) found the record
    with pytest.raises(StoreUnavailable, match="start the handler"):
        late.run(EVENT, SUFFIX, effect)


class Asks:
    """A `reconcile` that counts the questions and cannot tell."""

    def __init__(self) -> None:
        self.asked = 0

    def __call__(self, delivery: Delivery) -> bool | None:
        self.asked += 1
        return None


# --- Ambiguity survives every give-back --------------------------------------------------------


@pytest.mark.parametrize("give_back", [Fault.PASS, Fault.LOSE_RESPONSE])
def test_a_slow_take_over_given_back_leaves_the_event_ambiguous(
    give_back: Fault, firestore_client: firestore.Client, read_record: ReadRecord
) -> None:
    """Under on_ambiguous="skip", an effect that landed before a crash is never run a second
    time, whatever give-backs happen between the deliveries: B, which took the expired lease
    over and gave it back unstarted (its take-over slow; the give-back answered, or applied
    with its response lost), leaves the event as ambiguous as it found it. C asks `reconcile`
    and, as nothing can tell, records `unknown`: one effect, as if B had never come (it used to
    find a released lease, count it not ambiguous and run the handler again)."""
    crash_after_effect(firestore_client)
    time.sleep(CRASHED_LEASE + 0.5)
    slow_take_over_given_back(
        Weather(lambda m, n: give_back if (m, n) == ("Commit", 3) else Fault.PASS)
    )
    given_back = read_record(KEY)
    assert given_back is not None
    assert (given_back.state, given_back.has_lease) == (State.IN_PROGRESS, False)

    reconcile = Asks()
    outcome = dedup_on(Weather(), lease_seconds=CRASHED_LEASE).run(
        EVENT, SUFFIX, effect, reconcile=reconcile, on_ambiguous="skip"
    )

    assert (outcome.kind, reconcile.asked, effects(firestore_client)) == (
        OutcomeKind.AMBIGUOUS,
        1,
        1,
    )
    assert read_record(KEY).state is State.UNKNOWN  # type: ignore[union-attr]


class HeldCommit(AsyncFaultInterceptor):
    """The async client's slow write: the `number`-th Commit is applied, and its response held
    until `until` (monotonic)."""

    def __init__(self, number: int, until: float) -> None:
        super().__init__(lambda method, n: Fault.PASS)
        self.number, self.until, self.held = number, until, False

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        call = await super().intercept_unary_unary(continuation, details, request)
        if self.calls["Commit"] == self.number and not self.held:
            self.held = True
            await call  # applied and answered; the client sees it late
            await asyncio.sleep(max(0.0, self.until - time.monotonic()))
        return call


def test_a_slow_take_over_given_back_on_the_async_path_leaves_the_event_ambiguous(
    firestore_client: firestore.Client,
) -> None:
    """The same invariant on the async front door (`AsyncDeduplicator`): B's take-over is slow,
    B gives the lease back unstarted, and C under "skip" records `unknown`: one effect."""
    crash_after_effect(firestore_client)
    time.sleep(CRASHED_LEASE + 0.5)

    async def effect_async(delivery: AsyncDelivery) -> None:
        await delivery.client.collection(EFFECTS).document().create({"key": delivery.key})

    async def late_then_next() -> OutcomeKind:
        held = HeldCommit(2, past_the_budget())  # its create (1) found the record
        config = DedupConfig(
            cache_size=0, min_retry_seconds=0, rpc_timeout_seconds=1, lease_seconds=SLOW_LEASE
        )
        late = AsyncDeduplicator(config, client_factory=lambda: FaultyAsyncClient(held))
        with pytest.raises(StoreUnavailable, match="start the handler"):
            await late.run(EVENT, SUFFIX, effect_async)
        fresh = AsyncDeduplicator(
            DedupConfig(cache_size=0, lease_seconds=CRASHED_LEASE, rpc_timeout_seconds=1),
            client_factory=lambda: AsyncClient(project=PROJECT),
        )
        outcome = await fresh.run(EVENT, SUFFIX, effect_async, on_ambiguous="skip")
        return outcome.kind

    assert asyncio.run(late_then_next()) is OutcomeKind.AMBIGUOUS
    assert effects(firestore_client) == 1


def test_an_operator_release_leaves_the_event_ambiguous(
    firestore_client: firestore.Client, read_record: ReadRecord
) -> None:
    """`dedup release` of a lease whose handler crashed after its effect hands the lease back
    as if it had expired: under on_ambiguous="skip" the next delivery asks `reconcile`, then
    records `unknown`, and the effect happened once (it used to run the handler again)."""
    crash_after_effect(firestore_client)
    args = ["--project", firestore_client.project, "release", KEY, "--yes"]
    released = CliRunner().invoke(cli, args)
    assert released.exit_code == 0, released.output
    reconcile = Asks()

    outcome = dedup_on(Weather(), lease_seconds=CRASHED_LEASE).run(
        EVENT, SUFFIX, effect, reconcile=reconcile, on_ambiguous="skip"
    )

    assert (outcome.kind, reconcile.asked, effects(firestore_client)) == (
        OutcomeKind.AMBIGUOUS,
        1,
        1,
    )
    assert "revive" in show(firestore_client, KEY)["check"]


def test_a_lease_released_ambiguous_is_an_ambiguous_take_over() -> None:
    """The claim decision: a released lease is taken over; it is ambiguous when it was given
    back `ambiguous` (an unstarted give-back of an expired lease, `dedup release`), not after a
    handler's own release."""
    now = datetime(2026, 1, 1, tzinfo=UTC)

    def released(ambiguous: bool) -> Record:
        return Record(
            key=KEY, event_id=EVENT, suffix=SUFFIX, state=State.IN_PROGRESS, sent=False,
            owner="o", lease_started_at=None, lease_seconds=CRASHED_LEASE, attempts=1,
            first_attempt_at=None, last_attempt_at=None, sent_at=None, expire_at=None,
            last_error=None, payload_hash=None, mode=Mode.LEASE, ambiguous=ambiguous,
        )  # fmt: skip

    for ambiguous in (True, False):
        assert decide(released(ambiguous), now, AttemptLimit(1)) is Claim.TAKE_OVER
        assert takeover_ambiguous(released(ambiguous), now) is ambiguous


def test_a_handler_that_ran_settles_the_ambiguity(
    firestore_client: firestore.Client, read_record: ReadRecord
) -> None:
    """Guards the class: once an ambiguous take-over ran the handler (rerun), a handler that
    raised releases the lease unambiguous: the next delivery runs it without asking again."""
    crash_after_effect(firestore_client)
    time.sleep(CRASHED_LEASE + 0.5)
    dedup = dedup_on(Weather(), lease_seconds=CRASHED_LEASE)

    def fails(delivery: Delivery) -> None:
        raise RuntimeError("receiver 503")

    with pytest.raises(RuntimeError):
        dedup.run(EVENT, SUFFIX, fails, on_ambiguous="rerun")
    reconcile = Asks()

    outcome = dedup.run(EVENT, SUFFIX, effect, reconcile=reconcile, on_ambiguous="skip")

    assert (outcome.kind, reconcile.asked, effects(firestore_client)) == (OutcomeKind.RAN, 0, 2)


def test_a_reconcile_that_raises_leaves_the_event_ambiguous(
    firestore_client: firestore.Client, read_record: ReadRecord
) -> None:
    """Guards the class: B's `reconcile` raises on its ambiguous take-over; B writes nothing
    (no give-back), its lease expires, and C is ambiguous again: asked, `unknown`, one effect."""
    crash_after_effect(firestore_client)
    time.sleep(CRASHED_LEASE + 0.5)

    def broken(delivery: Delivery) -> bool | None:
        raise OSError("receiver unreachable")

    dedup = dedup_on(Weather(), lease_seconds=CRASHED_LEASE)
    with pytest.raises(OSError, match="unreachable"):
        dedup.run(EVENT, SUFFIX, effect, reconcile=broken, on_ambiguous="skip")
    time.sleep(CRASHED_LEASE + 0.5)
    reconcile = Asks()

    outcome = dedup.run(EVENT, SUFFIX, effect, reconcile=reconcile, on_ambiguous="skip")

    assert (outcome.kind, reconcile.asked, effects(firestore_client)) == (
        OutcomeKind.AMBIGUOUS,
        1,
        1,
    )


# --- The unstarted claim narrowed and named ----------------------------------------------------


def test_a_claim_whose_response_was_lost_is_learned_when_the_store_answers_again(
    firestore_client: firestore.Client, read_record: ReadRecord
) -> None:
    """A claim's create lands, its response is lost and the store stays down for longer than
    the RPC timeout, then answers again within the delivery's budget: the delivery reads its
    own owner token back and runs the handler (once, `sent`), instead of leaving its lease to
    expire so that the next delivery, under "skip", records `unknown` with no handler ever
    run."""
    weather = Weather(lambda m, n: Fault.LOSE_RESPONSE if (m, n) == ("Commit", 1) else Fault.PASS)
    weather.down_after[("Commit", 1)] = 1.5
    dedup = dedup_on(weather, lease_seconds=6)

    outcome = dedup.run(EVENT, SUFFIX, effect, on_ambiguous="skip")

    assert (outcome.kind, outcome.attempt, effects(firestore_client)) == (OutcomeKind.RAN, 1, 1)
    assert read_record(KEY).state is State.SENT  # type: ignore[union-attr]


def test_a_claim_that_landed_while_the_store_stayed_down_is_named(
    firestore_client: firestore.Client, read_record: ReadRecord
) -> None:
    """The window that remains, as docs/guarantees.md names it: a claim that landed while the
    store stayed down until the budget ended is ambiguous to the next delivery. The delivery
    says so in its error (its log line), under "skip" the next delivery records `unknown`
    without running the handler, and `dedup show` of that record says what to check."""
    weather = Weather(lambda m, n: Fault.LOSE_RESPONSE if (m, n) == ("Commit", 1) else Fault.PASS)
    weather.down_after[("Commit", 1)] = 10.0
    with pytest.raises(StoreUnavailable, match="claim may have landed"):
        dedup_on(weather, lease_seconds=CRASHED_LEASE).run(EVENT, SUFFIX, effect)
    time.sleep(CRASHED_LEASE + 0.5)

    outcome = dedup_on(Weather(), lease_seconds=CRASHED_LEASE).run(
        EVENT, SUFFIX, effect, on_ambiguous="skip"
    )

    assert (outcome.kind, effects(firestore_client)) == (OutcomeKind.AMBIGUOUS, 0)
    check = show(firestore_client, KEY)["check"]
    assert "never started" in check
    assert "claim may have landed" in check


def test_a_slow_claim_given_back_is_not_ambiguous(
    firestore_client: firestore.Client, read_record: ReadRecord
) -> None:
    """Guards the class: a fresh claim whose response comes after the budget is given back
    unstarted and unambiguous (nothing ran before it): the next delivery runs the handler once,
    under "skip" too."""
    weather = Weather()
    weather.hold[("Commit", 1)] = past_the_budget()
    with pytest.raises(StoreUnavailable, match="start the handler"):
        dedup_on(weather, lease_seconds=SLOW_LEASE).run(EVENT, SUFFIX, effect)
    given_back = read_record(KEY)
    assert given_back is not None
    assert (given_back.state, given_back.has_lease) == (State.IN_PROGRESS, False)

    outcome = dedup_on(Weather(), lease_seconds=CRASHED_LEASE).run(
        EVENT, SUFFIX, effect, on_ambiguous="skip"
    )

    assert (outcome.kind, effects(firestore_client)) == (OutcomeKind.RAN, 1)
