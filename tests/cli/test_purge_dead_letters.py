"""`dedup purge` spares what a redrive of a dead letter may still need.

It is impossible, without `--force`, for `dedup purge` to delete a record whose event a
dead-letter subscription of the project may still hold: it refuses an `--older-than` shorter
than the redelivery window (24 hours) plus the longest message retention of the project's
dead-letter subscriptions, as Pub/Sub lists them (the Cloud Run path's `<service>-dead-letter`
keeps 7 days, so 8 days), before reading or deleting anything, and names what to set.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import suppress
from datetime import timedelta
from typing import Any

import pytest
import requests
from google.cloud import firestore
from hypothesis import given
from hypothesis import strategies as st

from dedup.cli.purge_window import dead_letter_keeps, retention_of
from tests.cli import records
from tests.cli.conftest import Invoke
from tests.cli.records import record_fields
from tests.conftest import PROJECT

DAY = timedelta(days=1)


def nine_and_seven_days_old() -> list[dict[str, Any]]:
    """A record first attempted 9 days ago and one 7 days and an hour ago."""
    return [
        record_fields("old9", age=9 * DAY),
        record_fields("old7", age=7 * DAY + timedelta(hours=1)),
    ]


# --- what Pub/Sub lists, read without a server ------------------------------------------------


@given(st.integers(min_value=1, max_value=31 * 86400), st.booleans())
def test_a_retention_is_read_in_whole_seconds_rounded_up(seconds: int, fraction: bool) -> None:
    """`messageRetentionDuration` as Pub/Sub writes it (`604800s`, `1.5s`): never shortened."""
    text = f"{seconds}.5s" if fraction else f"{seconds}s"
    assert retention_of({"messageRetentionDuration": text}) == timedelta(seconds=seconds + fraction)


def test_no_retention_is_pubsubs_default_of_seven_days() -> None:
    """A subscription that sets no retention keeps messages 7 days, Pub/Sub's default."""
    assert retention_of({}) == timedelta(days=7)


def test_dead_letter_topics_are_found_from_the_policies() -> None:
    """A subscription on a topic some dead-letter policy names is a dead-letter subscription;
    a dead-letter topic no listed subscription reads is unknown, not ignored."""
    base = "projects/p"
    subscriptions: list[dict[str, Any]] = [
        {"name": f"{base}/subscriptions/a", "topic": f"{base}/topics/a",
         "deadLetterPolicy": {"deadLetterTopic": f"{base}/topics/a-dead-letter"}},
        {"name": f"{base}/subscriptions/a-dead-letter", "topic": f"{base}/topics/a-dead-letter",
         "messageRetentionDuration": "864000s"},
        {"name": f"{base}/subscriptions/b", "topic": f"{base}/topics/b",
         "deadLetterPolicy": {"deadLetterTopic": "projects/other/topics/b-dead"}},
        {"name": f"{base}/subscriptions/plain", "topic": f"{base}/topics/plain"},
    ]  # fmt: skip
    keeps, unknown = dead_letter_keeps(subscriptions)
    assert [(k.subscription, k.retention, k.source) for k in keeps] == [
        (f"{base}/subscriptions/a-dead-letter", timedelta(days=10), f"{base}/subscriptions/a")
    ]
    assert [(u.topic, u.source) for u in unknown] == [
        ("projects/other/topics/b-dead", f"{base}/subscriptions/b")
    ]


# --- the operator says the retention ----------------------------------------------------------


def test_a_given_retention_is_spared_and_none_or_force_lets_purge_go_on(
    invoke: Invoke, firestore_client: firestore.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--dead-letter-retention 7d` refuses `--older-than 7d` (exit 2, nothing deleted, dry run
    or not) and names `--older-than 8d`, which passes; `none` and `--force` let a 2-day cut-off
    through. No Pub/Sub is asked when the retention is given."""
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:9")  # nothing listens: never asked
    keys = records.write(
        firestore_client,
        [*nine_and_seven_days_old(), record_fields("old3", age=3 * DAY)],
    )
    before = records.raw(firestore_client, keys)
    for extra in ([], ["--dry-run"]):
        result = invoke("purge", "--older-than", "7d", "--dead-letter-retention", "7d", *extra)
        assert result.exit_code == 2, result.output
        said = " ".join(result.stderr.split())
        assert "--dead-letter-retention says a given-up event is kept 7d" in said
        assert "Use --older-than 8d or more" in said
        assert records.raw(firestore_client, keys) == before

    result = invoke("purge", "--older-than", "8d", "--dead-letter-retention", "7d")
    assert result.exit_code == 0, result.output
    assert "deleted 1 record(s)" in result.stdout
    result = invoke("purge", "--older-than", "2d", "--dead-letter-retention", "none", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "would delete 2 record(s)" in result.stdout
    result = invoke("purge", "--older-than", "2d", "--force", "--dry-run")
    assert result.exit_code == 0, result.output
    result = invoke("purge", "--older-than", "2d", "--dead-letter-retention", "soon")
    assert result.exit_code == 2
    assert "'soon' is not a duration" in result.stderr


# --- the project's dead letters, read from the Pub/Sub emulator ---------------------------------


def rest(method: str, path: str, body: Any = None) -> dict[str, Any]:
    """One call of the Pub/Sub emulator's REST API; raises on an error."""
    host = os.environ["PUBSUB_EMULATOR_HOST"]
    response = requests.request(method, f"http://{host}/v1/{path}", json=body, timeout=30)
    response.raise_for_status()
    return dict(response.json() or {})


@pytest.fixture
def dead_letters() -> Iterator[dict[str, str]]:
    """A trigger subscription whose dead letters go to `<service>-dead-letter`, read by a
    subscription keeping them 7 days, as `make deploy-run` makes them (tools/deploy_run.py:
    `--message-retention-duration=7d`), in the project the CLI purges; deleted at the end."""
    run = uuid.uuid4().hex[:8]
    base = f"projects/{PROJECT}"
    names = {
        "topic": f"{base}/topics/purge-{run}",
        "source": f"{base}/subscriptions/purge-{run}",
        "dead_topic": f"{base}/topics/purge-{run}-dead-letter",
        "dead": f"{base}/subscriptions/purge-{run}-dead-letter",
    }
    try:
        rest("PUT", names["topic"])
        rest("PUT", names["dead_topic"])
        rest(
            "PUT",
            names["dead"],
            {"topic": names["dead_topic"], "messageRetentionDuration": "604800s"},
        )
        rest("PUT", names["source"], {"topic": names["topic"], "deadLetterPolicy": {
            "deadLetterTopic": names["dead_topic"], "maxDeliveryAttempts": 15}})  # fmt: skip
        yield names
    finally:
        for key in ("source", "dead", "topic", "dead_topic"):
            with suppress(requests.HTTPError):
                rest("DELETE", names[key])


@pytest.mark.shared_emulators  # the Pub/Sub emulator
def test_purge_spares_what_the_projects_dead_letter_subscription_may_redrive(
    invoke: Invoke, firestore_client: firestore.Client, dead_letters: dict[str, str]
) -> None:
    """With a dead-letter subscription keeping 7 days, `--older-than 7d` (24 hours past the
    redelivery window, enough before) is refused, naming the subscription, its source and
    `--older-than 8d`; nothing is read or deleted. `--older-than 8d` deletes only what is
    older. A dead-letter topic that no subscription of the project reads is refused as
    unknown, naming `--dead-letter-retention`."""
    keys = records.write(
        firestore_client,
        nine_and_seven_days_old(),
    )
    before = records.raw(firestore_client, keys)

    result = invoke("purge", "--older-than", "7d")

    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert f"dead-letter subscription {dead_letters['dead']}" in said
    assert f"(the dead letters of {dead_letters['source']}) keeps a given-up event 7d" in said
    assert "a redrive that finds no record runs the handler again" in said
    assert "Use --older-than 8d or more" in said
    assert records.raw(firestore_client, keys) == before

    result = invoke("purge", "--older-than", "8d")
    assert result.exit_code == 0, result.output
    assert "deleted 1 record(s)" in result.stdout
    assert records.count(firestore_client) == 1

    rest("DELETE", dead_letters["dead"])
    result = invoke("purge", "--older-than", "30d", "--dry-run")
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert f"go to {dead_letters['dead_topic']}, and no subscription" in said
    assert "--dead-letter-retention DURATION" in said
