"""A dead record whose effect may have happened, on the Firestore emulator: an attempt produces
its effect and its process dies before "sent"; once its lease expires, the delivery that finds
the attempts used up buries the event `dead` and marks it `ambiguous` (that attempt may have
produced the effect). `dedup revive` refuses it without `--force`, so an operator following
the runbook for poison events does not run the handler a second time under
`on_ambiguous="skip"` (docs/operations.md, "A poison event").

The crash is real (a step hook raises at `Step.AFTER_EFFECT`, after the handler returned, so
nothing after it runs: no release, no "sent"); the lease's expiry is driven: its start is moved
an hour back on the record, as the database clock would see it an hour later.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from google.cloud import firestore

from dedup import DedupConfig, Deduplicator, Delivery, Mode, OutcomeKind, State, Step
from dedup.config import DEFAULT_COLLECTION
from dedup.kernel.record import Field
from tests.cli import records
from tests.cli.conftest import Invoke

SUFFIX = "sendEmail"


class Crash(BaseException):
    """The process dies: nothing of the delivery runs after it (no release, no outcome)."""


def crash_after_effect(
    dedup: Deduplicator, client: firestore.Client, event: str, effects: list[str]
) -> None:
    """One delivery produces the effect, then its process dies before "sent"; its lease is
    then made an hour old (expired on the database clock)."""

    def die(step: Step, key: str) -> None:
        if step is Step.AFTER_EFFECT:
            raise Crash

    stop = dedup.on_step(die)
    try:
        with pytest.raises(Crash):
            dedup.run(event, SUFFIX, lambda d: effects.append(d.key))
    finally:
        stop()
    document = client.collection(DEFAULT_COLLECTION).document(f"{event}-{SUFFIX}")
    document.update({Field.LEASE_STARTED_AT: records.now() - timedelta(hours=1)})


@pytest.mark.parametrize("max_attempts", [1, 2])
@pytest.mark.parametrize("burier", [Mode.LEASE, Mode.TRANSACTION])
def test_a_dead_record_whose_last_attempt_crashed_is_revived_only_with_force(
    invoke: Invoke, firestore_client: firestore.Client, max_attempts: int, burier: Mode
) -> None:
    """`max_attempts` attempts each produce the effect and die; the next delivery (lease mode,
    or transaction mode after a deploy that changed the function's mode) buries the record
    `dead`, `ambiguous: true`, without running the handler. `revive KEY` and `revive --state
    dead` refuse it (exit status 1, the record unchanged) and say to check the receiver, so a
    redelivery is still a duplicate: one effect per attempt, none more. `revive --force` hands
    it back, and the next delivery runs the handler, as the operator decided."""
    dedup = Deduplicator(
        DedupConfig(max_attempts=max_attempts, min_retry_seconds=0, cache_size=0),
        client=firestore_client,
    )
    event, effects = f"e-{uuid.uuid4().hex[:8]}", list[str]()
    key = f"{event}-{SUFFIX}"
    for _ in range(max_attempts):
        crash_after_effect(dedup, firestore_client, event, effects)
    assert effects == [key] * max_attempts  # attempt 2 (if any) was ambiguous, and ran: rerun

    def deliver() -> OutcomeKind:
        # under "skip" where the mode has an ambiguity to settle (the atomic modes have none)
        skip = "skip" if burier is Mode.LEASE else "rerun"
        return dedup.run(
            event, SUFFIX, lambda d: effects.append(d.key), mode=burier, on_ambiguous=skip
        ).kind

    assert deliver() is OutcomeKind.DEAD
    record = records.read(firestore_client, key)
    assert record is not None
    assert (record.state, record.ambiguous, record.attempts) == (State.DEAD, True, max_attempts)
    assert len(effects) == max_attempts

    shown = json.loads(invoke("show", key, "--json").stdout)
    assert shown[Field.AMBIGUOUS] is True
    assert f"dedup revive --force {key}" in shown["check"]

    before = records.raw(firestore_client, [key])
    for command in (("revive", key, "--yes"), ("revive", "--state", "dead", "--yes")):
        refused = invoke(*command)
        assert refused.exit_code == 1, refused.output
        assert f"{key}: cannot revive: state is dead, ambiguous" in refused.output
        assert "--force" in refused.output
        assert records.raw(firestore_client, [key]) == before
    assert deliver() is OutcomeKind.DUPLICATE
    assert len(effects) == max_attempts

    forced = invoke("revive", key, "--force", "--yes")
    assert forced.exit_code == 0, forced.output
    assert "revived 1 record(s)" in forced.stdout
    assert deliver() is OutcomeKind.RAN
    assert len(effects) == max_attempts + 1


def test_a_dead_record_whose_handler_raised_is_revived_without_force(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """A poison event buried after its handler raised on the last attempt never had its
    effect: it is not marked ambiguous, and `revive` hands it back as before."""
    dedup = Deduplicator(
        DedupConfig(max_attempts=1, min_retry_seconds=0, cache_size=0), client=firestore_client
    )
    event = f"e-{uuid.uuid4().hex[:8]}"

    def fails(delivery: Delivery) -> None:
        raise ConnectionError("the receiver is down")

    assert dedup.run(event, SUFFIX, fails).kind is OutcomeKind.DEAD
    record = records.read(firestore_client, f"{event}-{SUFFIX}")
    assert record is not None
    assert (record.state, record.ambiguous) == (State.DEAD, False)
    revived = invoke("revive", f"{event}-{SUFFIX}", "--yes")
    assert revived.exit_code == 0, revived.output
