"""How `trigger_once` answers a delivery of an event given up on (`DedupConfig.on_give_up`,
DEDUP_ON_GIVE_UP), served by functions-framework against the Firestore emulator.

"ack" (the default) answers 2xx, so the platform stops; "nack" answers 500 with no traceback
and never runs the handler again, so Pub/Sub counts the attempt and, its count spent, moves the
event to the trigger's dead-letter topic (the whole route: `tests/deploy/test_give_up_route.py`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import functions_framework
import pytest
from google.cloud import firestore

from dedup import Deduplicator, GivenUp, OutcomeKind, State, TerminalError, testing
from dedup.config import DedupConfig
from dedup.entrances.answers import GivenUpAnswer, LoggedRefusals
from dedup.errors import ConfigError
from dedup.kernel.record import Record
from dedup.kernel.transitions import dedup_key
from tests.cli import records
from tests.cli.records import record_fields

SUFFIX = "giveUp"
APP = """
import functions_framework
from google.cloud import firestore
from dedup import DedupConfig, SuffixRegistry, TerminalError, trigger_once

CONFIG = DedupConfig(max_attempts=2, min_retry_seconds=0, on_give_up={answer!r})


@functions_framework.cloud_event
@trigger_once({suffix!r}, config=CONFIG, registry=SuffixRegistry(), on_ambiguous={ambiguous!r})
def handle(event, delivery):
    db = firestore.Client()
    db.document(f"starts/{{delivery.key}}").set({{"n": firestore.Increment(1)}}, merge=True)
    how = (db.document("switches/{suffix}").get().to_dict() or {{}}).get("how", "ok")
    if how == "raise":
        raise RuntimeError("the receiver is down")
    if how == "terminal":
        raise TerminalError("the receiver refused the payload")
    db.document(f"effects/{{delivery.key}}").set({{"n": firestore.Increment(1)}}, merge=True)
"""

Post = Callable[[str], Any]


def serve(tmp_path: Path, answer: str, on_ambiguous: str = "rerun") -> Post:
    """A CloudEvent function under `trigger_once` with `on_give_up=answer`, 2 attempts; a
    function that posts one delivery of event `event_id` and returns the response."""
    source = tmp_path / f"app_{answer}_{on_ambiguous}.py"
    source.write_text(APP.format(answer=answer, suffix=SUFFIX, ambiguous=on_ambiguous))
    client = functions_framework.create_app("handle", str(source), "cloudevent").test_client()

    def post(event_id: str) -> Any:
        event = testing.custom_event("com.example.thing", {"x": 1}, event_id=event_id)
        return client.post("/", headers=dict(event.headers), data=event.body)

    return post


def switch(db: firestore.Client, how: str) -> None:
    """What the handler does next: "ok", "raise" (retryable) or "terminal"."""
    db.document(f"switches/{SUFFIX}").set({"how": how})


def count(db: firestore.Client, collection: str, key: str) -> int:
    """How often the handler counted `key` in `collection` ("starts" or "effects")."""
    return int((db.document(f"{collection}/{key}").get().to_dict() or {}).get("n", 0))


def state_of(db: firestore.Client, key: str) -> State | None:
    """The record's state."""
    record = Record.from_snapshot(db.collection("triggerEvents").document(key).get())
    return None if record is None else record.state


def crashed(db: firestore.Client, event_id: str, *, attempts: int) -> str:
    """Write the record of `event_id` as a process killed in its `attempts`-th attempt left it
    (`in_progress`, its lease expired five minutes ago); return its key."""
    fields = record_fields(
        event_id, SUFFIX, state=State.IN_PROGRESS, lease="expired", attempts=attempts,
        age=timedelta(minutes=5),
    )  # fmt: skip
    records.write(db, [fields])
    return dedup_key(event_id, SUFFIX)


def test_nack_answers_500_from_the_burial_on_and_never_runs_the_handler_again(
    tmp_path: Path, firestore_client: firestore.Client
) -> None:
    """A handler that always fails: its first delivery fails (500, released), the second buries
    the event (`dead`) and answers 500 saying so and naming `dedup revive`; every later delivery
    answers the same 500 without starting the handler. Nothing was logged with a traceback."""
    post = serve(tmp_path, "nack")
    switch(firestore_client, "raise")
    event_id = uuid.uuid4().hex
    key = dedup_key(event_id, SUFFIX)

    first = post(event_id)
    assert first.status_code == 500
    assert "given up" not in first.get_data(as_text=True)  # the handler's own failure
    buried = post(event_id)
    assert buried.status_code == 500
    text = buried.get_data(as_text=True)
    assert text.startswith(f"{key} is given up on"), text
    assert f"dedup revive {key}" in text
    assert state_of(firestore_client, key) is State.DEAD
    for _ in range(3):
        again = post(event_id)
        assert again.status_code == 500
        assert again.get_data(as_text=True).startswith(f"{key} is given up on")
    assert count(firestore_client, "starts", key) == 2
    assert count(firestore_client, "effects", key) == 0


def test_ack_answers_200_as_before(tmp_path: Path, firestore_client: firestore.Client) -> None:
    """The default: the burial and every later delivery answer 200 (the platform stops)."""
    post = serve(tmp_path, "ack")
    switch(firestore_client, "raise")
    event_id = uuid.uuid4().hex
    assert post(event_id).status_code == 500
    assert [post(event_id).status_code for _ in range(3)] == [200, 200, 200]
    assert state_of(firestore_client, dedup_key(event_id, SUFFIX)) is State.DEAD


@pytest.mark.parametrize(("answer", "status"), [("nack", 500), ("ack", 200)])
def test_a_terminal_failure_is_given_up_on_too(
    tmp_path: Path, firestore_client: firestore.Client, answer: str, status: int
) -> None:
    """`TerminalError` records `failed` at once: under "nack" answered 500 (the dead-letter
    topic keeps it for a redrive after the fix), under "ack" 200."""
    post = serve(tmp_path, answer)
    switch(firestore_client, "terminal")
    event_id = uuid.uuid4().hex
    assert [post(event_id).status_code for _ in range(2)] == [status, status]
    key = dedup_key(event_id, SUFFIX)
    assert state_of(firestore_client, key) is State.FAILED
    assert count(firestore_client, "starts", key) == 1


def test_a_crashed_last_attempt_is_buried_with_a_500(
    tmp_path: Path, firestore_client: firestore.Client
) -> None:
    """A process killed during every attempt leaves the record `in_progress` under an expired
    lease; once the attempts are spent, the next delivery buries it without running the
    handler, and under "nack" answers 500."""
    post = serve(tmp_path, "nack")
    switch(firestore_client, "ok")
    event_id = uuid.uuid4().hex
    key = crashed(firestore_client, event_id, attempts=2)
    buried = post(event_id)
    assert buried.status_code == 500
    assert buried.get_data(as_text=True).startswith(f"{key} is given up on")
    assert state_of(firestore_client, key) is State.DEAD
    assert count(firestore_client, "starts", key) == 0


@pytest.mark.parametrize(("answer", "status"), [("nack", 500), ("ack", 200)])
def test_an_event_recorded_unknown_is_given_up_on_too(
    tmp_path: Path, firestore_client: firestore.Client, answer: str, status: int
) -> None:
    """An expired lease under `on_ambiguous="skip"` records `unknown` without running the
    handler: under "nack" that delivery and every later one (a duplicate of `unknown`) are
    answered 500 naming `dedup revive`, under "ack" 200; the handler never starts."""
    post = serve(tmp_path, answer, on_ambiguous="skip")
    switch(firestore_client, "ok")
    event_id = uuid.uuid4().hex
    key = crashed(firestore_client, event_id, attempts=1)
    answers = [post(event_id) for _ in range(2)]
    assert [a.status_code for a in answers] == [status, status]
    if answer == "nack":
        assert all(a.get_data(as_text=True).startswith(f"{key} is given up on") for a in answers)
    assert state_of(firestore_client, key) is State.UNKNOWN
    assert count(firestore_client, "starts", key) == 0


def test_after_a_revive_the_next_delivery_runs_once(
    tmp_path: Path, firestore_client: firestore.Client
) -> None:
    """Fixed and revived (`dedup revive`), the event's next delivery runs the handler: one
    effect, 200; later deliveries are duplicates answered 200."""
    from click.testing import CliRunner

    from dedup.cli import cli
    from tests.conftest import PROJECT

    post = serve(tmp_path, "nack")
    switch(firestore_client, "raise")
    event_id = uuid.uuid4().hex
    key = dedup_key(event_id, SUFFIX)
    assert [post(event_id).status_code for _ in range(3)] == [500, 500, 500]
    switch(firestore_client, "ok")
    assert post(event_id).status_code == 500  # still dead: nothing runs it
    revived = CliRunner().invoke(cli, ["--project", PROJECT, "revive", key, "--yes"])
    assert revived.exit_code == 0, revived.output
    assert [post(event_id).status_code for _ in range(2)] == [200, 200]
    assert count(firestore_client, "effects", key) == 1
    assert state_of(firestore_client, key) is State.SENT


def test_outcome_says_whether_the_event_is_given_up_on(
    make_dedup: Callable[..., Deduplicator],
) -> None:
    """`Outcome.gave_up`: true for a burial, a terminal failure and a duplicate of either;
    false for a run and a duplicate of a sent event."""
    dedup = make_dedup(max_attempts=2, min_retry_seconds=0)

    def fail(delivery: Any) -> None:
        raise TerminalError("no")

    ran = dedup.run("e-ok", "outcomes", lambda d: None)
    assert (ran.kind, ran.gave_up) == (OutcomeKind.RAN, False)
    again = dedup.run("e-ok", "outcomes", lambda d: None)
    assert again.gave_up is False
    failed = dedup.run("e-failed", "outcomes", fail)
    assert (failed.kind, failed.gave_up) == (OutcomeKind.FAILED, True)
    duplicate = dedup.run("e-failed", "outcomes", lambda d: None)
    assert (duplicate.kind, duplicate.gave_up) == (OutcomeKind.DUPLICATE, True)

    def boom(delivery: Any) -> None:
        raise RuntimeError("down")

    with pytest.raises(RuntimeError):  # attempt 1 of 2: released, the platform retries
        dedup.run("e-dead", "outcomes", boom)
    dead = dedup.run("e-dead", "outcomes", boom)
    assert (dead.kind, dead.gave_up) == (OutcomeKind.DEAD, True)


def test_the_setting_is_read_and_checked() -> None:
    """DEDUP_ON_GIVE_UP: "ack" by default, "nack" (any case), anything else refused naming it."""
    assert DedupConfig.from_env({}).on_give_up == "ack"
    assert DedupConfig.from_env({"DEDUP_ON_GIVE_UP": "NACK"}).on_give_up == "nack"
    with pytest.raises(ConfigError, match="DEDUP_ON_GIVE_UP must be 'ack'"):
        DedupConfig.from_env({"DEDUP_ON_GIVE_UP": "drop"})
    with pytest.raises(ConfigError, match="on_give_up"):
        DedupConfig(on_give_up="drop")  # type: ignore[arg-type]


def test_the_scheduler_wrapper_logs_no_traceback_for_it() -> None:
    """The filter firebase-functions' scheduler wrapper logs through drops a `GivenUpAnswer`
    (the delivery wrote its line already), and nothing else."""
    refusals = LoggedRefusals()

    def record(error: BaseException) -> logging.LogRecord:
        return logging.LogRecord("x", logging.ERROR, "f", 1, "m", None, (type(error), error, None))

    assert refusals.filter(record(GivenUpAnswer("dead: k"))) is False
    assert refusals.filter(record(GivenUp("dead: k"))) is True
    assert refusals.filter(record(RuntimeError("x"))) is True
