"""The upload, digest and alert functions' pure parts: which objects count, the digest's day,
the chat message, and the start-up checks that name a missing or invalid variable."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from firebase_functions.alerts import crashlytics_fn

from dedup.errors import ConfigError
from functions import alert_new_fatal_issue, daily_digest, register_upload
from functions.runtime import check_function_settings


@pytest.mark.parametrize(
    ("name", "uid"),
    [
        ("uploads/u1/a.png", "u1"),
        ("uploads/u1/dir/b.png", "u1"),
        ("uploads/u1/", None),
        ("uploads/a.png", None),
        ("other/u1/a.png", None),
        ("uploads/__x__/a.png", None),
        ("uploads/./a.png", None),
    ],
)
def test_only_objects_under_uploads_uid_count(name: str, uid: str | None) -> None:
    """An object counts for `<uid>` only under `uploads/<uid>/<file>`, uid a document id."""
    assert register_upload.uploader(name) == uid


def test_the_upload_document_id_is_the_object_id_in_one_segment() -> None:
    """`uploads/<object id>` is one document per generation: the id's slashes are quoted."""
    data: Any = SimpleNamespace(
        bucket="b", name="uploads/u1/a.png", generation=7, id="b/uploads/u1/a.png/7"
    )
    assert register_upload.upload_document_id(data) == "b%2Fuploads%2Fu1%2Fa.png%2F7"
    data.id = None
    assert register_upload.upload_document_id(data) == "b%2Fuploads%2Fu1%2Fa.png%2F7"


@pytest.mark.parametrize(
    ("url", "zone", "problem"),
    [
        (None, None, "DIGEST_URL"),
        ("ftp://x", None, "DIGEST_URL"),
        ("https://x/digest", "Mars/Olympus", "DIGEST_TIME_ZONE"),
    ],
)
def test_a_bad_digest_setting_is_named(url: str | None, zone: str | None, problem: str) -> None:
    """The start-up check names the variable that is missing or invalid."""
    with pytest.raises(ConfigError, match=problem):
        daily_digest.parse_settings(url, zone)


def test_the_digest_time_zone_defaults_to_utc() -> None:
    """Unset or empty DIGEST_TIME_ZONE is UTC."""
    assert daily_digest.parse_settings("https://x", None)[1].key == "UTC"
    assert daily_digest.parse_settings("https://x", " ")[1].key == "UTC"


def test_the_previous_day_is_the_calendar_day_before_the_run_in_the_zone() -> None:
    """08:00 Paris on 2 Dec (07:00 UTC) counts 1 Dec, Paris midnight to midnight."""
    zone = ZoneInfo("Europe/Paris")
    start, end = daily_digest.previous_day(datetime(2026, 12, 2, 7, 0, tzinfo=UTC), zone)
    assert (start.isoformat(), end.isoformat()) == (
        "2026-12-01T00:00:00+01:00",
        "2026-12-02T00:00:00+01:00",
    )
    start, _ = daily_digest.previous_day(datetime(2026, 12, 2, 0, 30, tzinfo=UTC), ZoneInfo("UTC"))
    assert start.date().isoformat() == "2026-12-01"


def test_a_missing_chat_webhook_is_named() -> None:
    """CHAT_WEBHOOK_URL missing or not http(s) is refused, naming it."""
    for raw in (None, "", "slack.com/hook"):
        with pytest.raises(ConfigError, match="CHAT_WEBHOOK_URL"):
            alert_new_fatal_issue.parse_webhook_url(raw)


def test_each_new_function_refuses_to_start_without_its_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An instance serving the function checks its settings at start-up."""
    for target, variable in (
        ("daily_digest", "DIGEST_URL"),
        ("alert_new_fatal_issue", "CHAT_WEBHOOK_URL"),
    ):
        daily_digest.settings.cache_clear()
        alert_new_fatal_issue.webhook_url.cache_clear()
        monkeypatch.delenv(variable, raising=False)
        with pytest.raises(ConfigError, match=variable):
            check_function_settings({"FUNCTION_TARGET": target})
    daily_digest.settings.cache_clear()
    alert_new_fatal_issue.webhook_url.cache_clear()


def test_the_chat_message_has_the_title_version_and_console_link() -> None:
    """Slack/Google Chat `text`: the issue title, the app version and a console link."""
    issue = crashlytics_fn.Issue(
        id="i9", title="NPE in Main", subtitle="Main.kt", app_version="2.1"
    )
    payload = crashlytics_fn.NewFatalIssuePayload(issue=issue)
    data = crashlytics_fn.FirebaseAlertData(create_time=None, end_time=None, payload=payload)  # type: ignore[arg-type]
    event = crashlytics_fn.CrashlyticsEvent(
        alert_type="crashlytics.newFatalIssue", app_id="1:2:android:3", data=data,
        id="e1", source="//firebasealerts.googleapis.com/projects/1", specversion="1.0",
        subject=None, time=datetime(2026, 12, 2, tzinfo=UTC), type="t",
    )  # fmt: skip
    text = alert_new_fatal_issue.chat_message(event, "my-project")["text"]
    assert "NPE in Main" in text
    assert "2.1" in text
    assert (
        "https://console.firebase.google.com/project/my-project/crashlytics/app/1:2:android:3/"
        "issues/i9" in text
    )
