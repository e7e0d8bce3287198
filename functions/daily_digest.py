"""`daily_digest`: every morning, POST the previous day's number of published posts to
`DIGEST_URL`.

Runs on Cloud Scheduler's unix-cron `0 8 * * *` (08:00) in the time zone `DIGEST_TIME_ZONE`
names (an IANA zone such as `Europe/Paris`; UTC when unset), with `retry_count=3`: a released
lease is retried by Scheduler. "The previous day" is the calendar day before the run's schedule
time, in that zone; a post counts when `published` is true and its `publishedAt` timestamp
falls in that day. The body is JSON:
`{"date": "2026-12-01", "timeZone": "UTC", "publishedPosts": 3, "scheduleTime": "..."}`.

Exactly once per scheduled run, lease mode: a run is the job name plus its schedule time, so
every retry of one run is that run. The POST carries `Idempotency-Key: <delivery.key>`
(`functions.http_delivery`), so the crash window a lease leaves (sent, "sent" not yet recorded)
reruns with the same key, which the receiver drops: `on_ambiguous="rerun"`.

Settings are checked at start-up: `DIGEST_URL` must be an http(s) URL and `DIGEST_TIME_ZONE`
a zone the instance knows; the error names the variable.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, time, timedelta
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from firebase_functions import params, scheduler_fn
from google.cloud.firestore_v1.base_query import FieldFilter

from dedup import Delivery, trigger_once
from dedup.errors import ConfigError
from functions.boundary import scheduled
from functions.http_delivery import post_once
from functions.runtime import startup_check

SUFFIX = "daily_digest"
SCHEDULE = "0 8 * * *"
TIME_ZONE_VARIABLE = "DIGEST_TIME_ZONE"
DEFAULT_TIME_ZONE = "UTC"
RETRY_COUNT = 3


def parse_settings(url: str | None, zone: str | None) -> tuple[str, ZoneInfo]:
    """(DIGEST_URL, time zone) from the variables' text; `ConfigError` names a bad one."""
    if not url or not url.strip().startswith(("http://", "https://")):
        raise ConfigError(
            "DIGEST_URL must be set to the http:// or https:// URL that receives the daily digest"
        )
    name = (zone or "").strip() or DEFAULT_TIME_ZONE
    try:
        return url.strip(), ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"{TIME_ZONE_VARIABLE}={name!r} is no IANA time zone: set it to one such as "
            "Europe/Paris, or leave it unset for UTC"
        ) from None


@startup_check("daily_digest")  # a bad setting fails at start-up, not on the first run
@cache
def settings() -> tuple[str, ZoneInfo]:
    """This instance's (DIGEST_URL, time zone), read once."""
    return parse_settings(os.environ.get("DIGEST_URL"), os.environ.get(TIME_ZONE_VARIABLE))


def previous_day(schedule_time: datetime, zone: ZoneInfo) -> tuple[datetime, datetime]:
    """[start, end) of the calendar day before `schedule_time`'s day in `zone`."""
    today = schedule_time.astimezone(zone).date()
    start = datetime.combine(today - timedelta(days=1), time(), tzinfo=zone)
    return start, datetime.combine(today, time(), tzinfo=zone)


@scheduled  # no usable X-CloudScheduler-ScheduleTime: 400, nothing runs
@scheduler_fn.on_schedule(
    schedule=SCHEDULE,
    timezone=params.StringParam(TIME_ZONE_VARIABLE, default=DEFAULT_TIME_ZONE),
    retry_count=RETRY_COUNT,
)
@trigger_once(SUFFIX)
def daily_digest(event: scheduler_fn.ScheduledEvent, delivery: Delivery) -> None:
    """POST the previous day's published-post count, keyed by this run."""
    url, zone = settings()
    start, end = previous_day(event.schedule_time, zone)
    query = (
        delivery.client.collection("posts")
        .where(filter=FieldFilter("published", "==", True))
        .where(filter=FieldFilter("publishedAt", ">=", start))
        .where(filter=FieldFilter("publishedAt", "<", end))
    )
    aggregation: Any = query.count(alias="published")  # google-cloud-firestore mistypes it
    counted = aggregation.get()
    count = int(counted[0][0].value)
    body = {
        "date": start.date().isoformat(),
        "timeZone": zone.key,
        "publishedPosts": count,
        "scheduleTime": event.schedule_time.isoformat(),
    }
    post_once(
        url,
        json.dumps(body).encode(),
        content_type="application/json",
        idempotency_key=delivery.key,
    )
