"""A function under `@trigger_once` that cannot be deduplicated is refused before anything
deploys or an emulator starts (`tools.exports.classify`), naming the function and saying why;
every event trigger and a unix-cron schedule pass."""

from __future__ import annotations

from typing import Any

import pytest
from firebase_functions import https_fn, identity_fn, scheduler_fn, storage_fn

from dedup import SuffixRegistry, trigger_once
from dedup.kinds import cron_equivalent
from tools.exports import DeclarationError, classify


def handler(event: Any, delivery: Any) -> None:
    """Does nothing."""


def once(suffix: str) -> Any:
    return trigger_once(suffix, registry=SuffixRegistry())(handler)


def test_a_blocking_function_under_trigger_once_is_refused() -> None:
    """identity_fn calls are synchronous and never retried: refused, named."""
    function = identity_fn.before_user_created()(once("blocking"))
    with pytest.raises(DeclarationError, match=r"welcome is a blocking function \(identity_fn\)"):
        classify("welcome", function)


def test_an_http_function_under_trigger_once_is_refused_with_the_entrance_to_use() -> None:
    """Not an event: the refusal names the HTTP entrance instead."""
    function = https_fn.on_request()(once("http"))
    with pytest.raises(DeclarationError, match=r"not an event function.*idempotent_http"):
        classify("webhook", function)


def test_an_app_engine_schedule_is_refused_with_its_unix_cron_form() -> None:
    """Cloud Scheduler sets the run's identity only for unix-cron schedules."""
    function = scheduler_fn.on_schedule(schedule="every 5 minutes")(once("appEngine"))
    with pytest.raises(DeclarationError, match=r'tick is scheduled "every 5 minutes".*"\*/5'):
        classify("tick", function)


def test_event_triggers_and_unix_cron_schedules_pass() -> None:
    """A Storage trigger and a `0 8 * * *` schedule under trigger_once are deployable."""
    assert (
        classify("upload", storage_fn.on_object_finalized(bucket="b")(once("upload"))).name
        == "upload"
    )
    schedule = scheduler_fn.on_schedule(schedule="0 8 * * *")(once("cron"))
    assert classify("digest", schedule).name == "digest"


@pytest.mark.parametrize(
    ("schedule", "cron"),
    [
        ("every 5 minutes", "*/5 * * * *"),
        ("every 1 hours", "0 * * * *"),
        ("every 2 hours", "0 */2 * * *"),
        ("every day 08:30", "30 8 * * *"),
        ("every monday 09:00", None),
    ],
)
def test_the_cron_equivalent_of_app_engine_schedules(schedule: str, cron: str | None) -> None:
    """The refusal's hint is the unix-cron schedule that runs at the same times."""
    assert cron_equivalent(schedule) == cron
