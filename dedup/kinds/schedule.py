"""Scheduled runs (`scheduler_fn.on_schedule`): everything the project knows about them.

* **Reading.** A run is not a CloudEvent: it is keyed by the job name and the
  `X-CloudScheduler-ScheduleTime` header of the request being served (`<job>@<time>`), with
  the subject `jobs/<job>/runs/<schedule time>` and the source `jobs/<job>`. firebase-functions
  puts the current time in the event when that header is missing or does not parse, which is
  no identity: such a request raises `MissingEventId` naming the header (logged at ERROR),
  before any record is read or written.
* **Declaration.** A schedule in the App Engine form ("every 5 minutes") is refused before
  deploy with its unix-cron equivalent (`cron_equivalent`): Cloud Scheduler sets the header
  only for unix-cron schedules.
* **Deploy.** A Cloud Scheduler job per function (`tools/deploy`, firebase-tools), with a
  `retry_count` of at least 1 (`dedup manifest`).
* **Retry.** Cloud Scheduler retries any non-2xx up to the job's `retryCount`.
"""

from __future__ import annotations

import logging
import re
import sys
from datetime import UTC
from typing import Any

from dedup.errors import MissingEventId
from dedup.kinds.base import EventInfo, Kind, canonical, cloud_event_reader, own_subject, parse_time

SCHEDULE_TIME_HEADER = "X-CloudScheduler-ScheduleTime"
"""The header Cloud Scheduler sets to the run's scheduled time (unix-cron schedules)."""
JOB_NAME_HEADER = "X-CloudScheduler-JobName"
"""The header Cloud Scheduler sets to the job's name."""
EVENT_CLASS = "firebase_functions.scheduler_fn.ScheduledEvent"
"""The event object `scheduler_fn.on_schedule` passes (module and qualified name)."""
logger = logging.getLogger("dedup.events")


def read_event(event: Any) -> EventInfo:
    """A `scheduler_fn.ScheduledEvent`: the job and the schedule time of the request served."""
    raw = _request_header(SCHEDULE_TIME_HEADER)
    scheduled = parse_time(raw.replace("Z", "+00:00") if raw else None)
    if scheduled is None:
        why = (
            f"a scheduled run needs the {SCHEDULE_TIME_HEADER} header (an RFC 3339 time, which "
            f"Cloud Scheduler sets for unix-cron schedules); this request "
            f"{'has none' if raw is None else 'has one that does not parse'}, so nothing runs "
            f"(firebase-functions would use the current time, which is no identity). To run a "
            f"job by hand, set {SCHEDULE_TIME_HEADER} and {JOB_NAME_HEADER} (docs/usage.md)"
        )
        logger.error(why)
        raise MissingEventId(why)
    at = scheduled.astimezone(UTC).isoformat().replace("+00:00", "Z")
    job = event.job_name or _request_header(JOB_NAME_HEADER) or "unnamed-job"
    return EventInfo(
        event_id=f"{job}@{at}",
        payload=canonical({"job": job, "scheduleTime": at}),
        event_time=scheduled,
        document_path=None,
        subject=f"jobs/{job}/runs/{at}",
        source=f"jobs/{job}",
    )


def _request_header(name: str) -> str | None:
    """Header `name` of the HTTP request being served (None outside a request, or absent)."""
    flask = sys.modules.get("flask")
    if flask is None or not flask.has_request_context():
        return None
    value = flask.request.headers.get(name)
    return value if isinstance(value, str) else None


_EVERY = (
    r"(?i)every\s+(?:(?P<n>\d+)\s+(?P<unit>minutes?|mins?|hours?)|day\s+(?P<h>\d\d):(?P<m>\d\d))"
)


def cron_equivalent(schedule: str) -> str | None:
    """The unix-cron form of an App Engine schedule ("every 5 minutes", "every 2 hours",
    "every day 08:00"), or None when there is none this simple (or it is not that form)."""
    match = re.fullmatch(_EVERY, schedule.strip())
    if match is None:
        return None
    if match["h"] is not None:
        return f"{int(match['m'])} {int(match['h'])} * * *"
    n = int(match["n"])
    if match["unit"].lower().startswith("h"):
        return "0 * * * *" if n == 1 else f"0 */{n} * * *"
    return "* * * * *" if n == 1 else f"*/{n} * * * *"


def is_unix_cron(schedule: str) -> bool:
    """Five space-separated fields, as unix-cron writes a schedule."""
    return len(schedule.split()) == 5 and not schedule.strip().lower().startswith("every")


def schedule_problem(name: str, schedule: str) -> str | None:
    """Why function `name`, scheduled `schedule`, cannot be deduplicated; None when it can."""
    if is_unix_cron(schedule):
        return None
    cron = cron_equivalent(schedule)
    hint = f' write it as "{cron}"' if cron else " write it in unix-cron form"
    return (
        f'{name} is scheduled "{schedule}", the App Engine form: Cloud Scheduler sets '
        "X-CloudScheduler-ScheduleTime, the run's identity, only for unix-cron "
        f"schedules;{hint}"
    )


KIND = Kind(
    "schedule",
    (),
    read_event,
    cloud_event_reader(own_subject),
    retry="schedule",
    apis=("cloudscheduler.googleapis.com",),
)
