"""`alert_new_fatal_issue`: tell a chat room about each new fatal Crashlytics issue.

Fires on Firebase Alerts' `crashlytics.newFatalIssue`. POSTs to `CHAT_WEBHOOK_URL` (a Slack or
Google Chat incoming webhook: both read `{"text": ...}` and its `<url|label>` links) a message
with the issue's title, the app version, and a link to the issue in the Crashlytics console.

Exactly once per alert, lease mode, keyed by the alert's CloudEvent id, with
`Idempotency-Key: <delivery.key>` on the POST (`functions.http_delivery`).

`on_ambiguous="rerun"`, chosen because a lost alert costs more than a doubled one: when an
instance dies between the POST and the "sent" record, nobody can ask Slack or Google Chat
whether the message arrived (no reconcile), and skipping would risk a fatal crash that nobody
hears about; rerunning posts at worst the same alert twice in a room of people (a relay that
honours `Idempotency-Key` drops the copy).

`CHAT_WEBHOOK_URL` is checked at start-up (an http(s) URL), the error naming it. The console
link uses the project id the platform sets (`GCLOUD_PROJECT`).
"""

from __future__ import annotations

import json
import os
from functools import cache

from firebase_functions.alerts import crashlytics_fn

from dedup import Delivery, trigger_once
from dedup.errors import ConfigError
from functions.http_delivery import post_once
from functions.runtime import startup_check

SUFFIX = "alert_new_fatal_issue"
CONSOLE = (
    "https://console.firebase.google.com/project/{project}/crashlytics/app/{app}/issues/{issue}"
)

FatalIssueEvent = crashlytics_fn.CrashlyticsEvent[crashlytics_fn.NewFatalIssuePayload]


def parse_webhook_url(raw: str | None) -> str:
    """The chat webhook URL from `CHAT_WEBHOOK_URL`; `ConfigError` says what is expected."""
    if not raw or not raw.strip().startswith(("http://", "https://")):
        raise ConfigError(
            "CHAT_WEBHOOK_URL must be set to the http:// or https:// URL of a Slack or Google "
            "Chat incoming webhook"
        )
    return raw.strip()


@startup_check("alert_new_fatal_issue")  # a bad setting fails at start-up, not on an alert
@cache
def webhook_url() -> str:
    """This instance's chat webhook, read once."""
    return parse_webhook_url(os.environ.get("CHAT_WEBHOOK_URL"))


def chat_message(event: FatalIssueEvent, project: str) -> dict[str, str]:
    """The chat message of one alert: title, app version, console link."""
    issue = event.data.payload.issue
    app = event.app_id or "unknown-app"
    link = CONSOLE.format(project=project or "-", app=app, issue=issue.id)
    return {
        "text": (
            f"New fatal issue in {app} {issue.app_version}: {issue.title}\n"
            f"{issue.subtitle}\n<{link}|Open it in the Crashlytics console>"
        )
    }


@crashlytics_fn.on_new_fatal_issue_published()
@trigger_once(SUFFIX, on_ambiguous="rerun")  # a lost alert costs more than a doubled one
def alert_new_fatal_issue(event: FatalIssueEvent, delivery: Delivery) -> None:
    """POST the alert to the chat webhook, keyed by the alert."""
    project = os.environ.get("GCLOUD_PROJECT") or os.environ.get("GOOGLE_CLOUD_PROJECT", "")
    body = json.dumps(chat_message(event, project)).encode()
    post_once(webhook_url(), body, content_type="application/json", idempotency_key=delivery.key)
