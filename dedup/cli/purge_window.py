"""How old a record must be before `dedup purge` may delete it: outside the platform's
redelivery window, and, where the project has dead letters, outside that window plus how long
its dead-letter subscriptions keep a given-up event.

A dead-lettered event that `dedup dead-letters redrive` delivers again must still find its
record: a redrive that finds none runs the handler again. So a record must outlive the longest
time a dead letter can wait for its redrive: the platform's redelivery window (an event is
dead-lettered at the latest when its trigger stops retrying it) plus how long the dead-letter
subscription keeps the message (`messageRetentionDuration`; Pub/Sub's default, 7 days, when it
sets none). `make deploy-run` makes one such subscription per event function,
`<service>-dead-letter`, keeping messages 7 days (docs/deploy.md).

The project knows its dead letters from Pub/Sub itself: every subscription whose
`deadLetterPolicy` names a topic, and the subscriptions on that topic (`dead_letter_keeps`).
Nothing else is read. Where Pub/Sub cannot be asked, the operator says the retention
(`--dead-letter-retention DURATION`, or `none` for a project without dead letters): a purge
never guesses a shorter one. With the Firestore emulator and no Pub/Sub emulator there are no
dead letters to spare: nothing is asked.

Invariants: both refusals (`require_outside_window`, `require_dead_letters_kept`) come before
anything is read or deleted, exit with status 2 and name the `--older-than` that passes; with a
dead-letter subscription the age asked for is the window plus the longest retention found; a
dead-letter topic no subscription of the project reads (one in another project) is refused as
unknown, never taken as zero.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

import click

from dedup.cli.pubsub_rest import PubSub
from dedup.cli.render import DURATION, format_exact

DEFAULT_RETENTION = timedelta(days=7)
"""Pub/Sub's message retention of a subscription that sets none."""
_SECONDS = re.compile(r"(\d+)(?:\.\d+)?s")
"""A protobuf Duration in JSON: `604800s`, `1.5s`."""


@dataclass(frozen=True)
class RedeliveryWindow:
    """How long the platform may deliver an event again after its first delivery."""

    span: timedelta
    """The window's length."""
    triggers: str
    """The triggers it applies to, as the operator reads them."""
    source: str
    """Where the fact is stated, with its references."""

    def describe(self) -> str:
        """`24 hours for 2nd gen event functions and Eventarc (docs/platform.md)`."""
        hours = int(self.span.total_seconds()) // 3600
        return f"{hours} hours for {self.triggers} ({self.source})"


REDELIVERY_WINDOWS = (
    RedeliveryWindow(
        span=timedelta(hours=24),
        triggers="2nd gen event functions and Eventarc",
        source="docs/platform.md",
    ),
)
"""The redelivery windows of the triggers whose records this template keeps. Its functions are
2nd gen: Firestore and Pub/Sub triggers are delivered by Eventarc (24 hours); HTTP and callable
functions are retried by their clients and task-queue functions by their queue's retry config,
both well inside that (docs/tasks.md: about 30 minutes)."""

LONGEST_REDELIVERY_WINDOW = max(REDELIVERY_WINDOWS, key=lambda window: window.span)
"""The window a record must outlive: a redelivery that finds no record runs the handler again."""


def require_outside_window(older_than: timedelta, *, force: bool, option: str) -> None:
    """Refuse (usage error, exit status 2) an age cut-off shorter than the redelivery window.

    Called before anything is read or deleted. `force` lets the operator delete anyway.
    """
    window = LONGEST_REDELIVERY_WINDOW
    if force or older_than >= window.span:
        return
    raise click.UsageError(
        f"{option} {format_exact(older_than)} is shorter than the longest redelivery window "
        f"of this collection's triggers, {window.describe()}: a redelivery inside it that finds "
        f"no record runs the handler again. Use {option} {format_exact(window.span)} or "
        "more, or --force to delete anyway."
    )


@dataclass(frozen=True)
class DeadLetterKeep:
    """One dead-letter subscription and how long it keeps a message."""

    subscription: str
    """`projects/P/subscriptions/S`, on a dead-letter topic."""
    retention: timedelta
    """Its `messageRetentionDuration`."""
    source: str
    """A subscription whose dead letters land on its topic."""


@dataclass(frozen=True)
class Unknown:
    """A dead-letter topic whose subscriptions this project's listing does not show."""

    topic: str
    """`projects/P/topics/T`."""
    source: str
    """A subscription whose dead letters land there."""


def retention_of(subscription: Mapping[str, Any]) -> timedelta:
    """A subscription's `messageRetentionDuration`, Pub/Sub's default when it has none."""
    text = str(subscription.get("messageRetentionDuration") or "")
    match = _SECONDS.fullmatch(text)
    if match is None:
        return DEFAULT_RETENTION
    return timedelta(seconds=int(match.group(1)) + (1 if "." in text else 0))  # a part rounds up


def dead_letter_keeps(
    subscriptions: Iterable[Mapping[str, Any]],
) -> tuple[list[DeadLetterKeep], list[Unknown]]:
    """The dead-letter subscriptions among `subscriptions` (one project's, as Pub/Sub lists
    them), each with a source subscription whose dead letters it receives; and the dead-letter
    topics none of them reads."""
    listed = list(subscriptions)
    sources: dict[str, str] = {}
    for subscription in listed:
        policy = subscription.get("deadLetterPolicy") or {}
        topic = policy.get("deadLetterTopic")
        if isinstance(topic, str) and topic:
            sources.setdefault(topic, str(subscription.get("name")))
    keeps = [
        DeadLetterKeep(str(s.get("name")), retention_of(s), sources[str(s.get("topic"))])
        for s in listed
        if s.get("topic") in sources
    ]
    read = {keep.subscription for keep in keeps}
    read_topics = {str(s.get("topic")) for s in listed if s.get("name") in read}
    unknown = [
        Unknown(topic, source) for topic, source in sources.items() if topic not in read_topics
    ]
    return keeps, unknown


def listed_subscriptions(pubsub: PubSub, project: str) -> list[dict[str, Any]]:
    """Every subscription of `project`, page by page."""
    found: list[dict[str, Any]] = []
    token = ""
    while True:
        path = f"projects/{project}/subscriptions?pageSize=1000"
        page = pubsub.get(path + (f"&pageToken={token}" if token else ""), f"projects/{project}")
        found += [s for s in page.get("subscriptions") or [] if isinstance(s, dict)]
        token = str(page.get("nextPageToken") or "")
        if not token:
            return found


def read_keeps(project: str) -> tuple[list[DeadLetterKeep], list[Unknown]] | None:
    """The project's dead-letter subscriptions, asked of Pub/Sub (`PubSub.connect`); None when
    only the Firestore emulator is in use (no Pub/Sub to ask, no dead letters). A Pub/Sub that
    cannot be read is a click error naming `--dead-letter-retention`."""
    if (
        os.environ.get("FIRESTORE_EMULATOR_HOST", "").strip()
        and not os.environ.get("PUBSUB_EMULATOR_HOST", "").strip()
    ):
        return None
    try:
        return dead_letter_keeps(listed_subscriptions(PubSub.connect(), project))
    except click.ClickException as exc:
        raise click.ClickException(
            f"could not list the Pub/Sub subscriptions of {project} to find its dead letters "
            f"({exc.message}); purge spares what a redrive of a dead letter may still need. "
            "Give the account roles/pubsub.viewer, or pass --dead-letter-retention DURATION "
            "(the longest message retention of a dead-letter subscription of the project: 7d "
            "for those `make deploy-run` creates), or --dead-letter-retention none for a "
            "project without dead-letter topics"
        ) from exc


NoDeadLetters = Literal["none"]
"""`--dead-letter-retention none`: the operator says the project has no dead-letter topic."""


class RetentionType(click.ParamType[timedelta | NoDeadLetters, Any]):
    """`--dead-letter-retention`: a duration such as `7d`, or `none`."""

    name = "retention"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> timedelta | NoDeadLetters:
        """`none`, or the duration; fails with the accepted forms."""
        if isinstance(value, timedelta):
            return value
        if value == "none":
            return "none"
        return DURATION.convert(value, param, ctx)


def require_dead_letters_kept(
    project: str | None, older_than: timedelta, retention: timedelta | NoDeadLetters | None
) -> None:
    """Refuse (usage error, exit status 2) an age cut-off shorter than the redelivery window
    plus the longest retention of the project's dead-letter subscriptions: `retention` when
    the operator gives it, else what Pub/Sub lists (`read_keeps`). Called before anything is
    read or deleted, and only without `--force`."""
    if retention == "none":
        return
    window = LONGEST_REDELIVERY_WINDOW
    if isinstance(retention, timedelta):
        keeps = [DeadLetterKeep("", retention, "")]
    else:
        found = read_keeps(project) if project else None
        if found is None:
            return
        keeps, unknown = found
        if unknown:
            topic = unknown[0]
            raise click.UsageError(
                f"the dead letters of {topic.source} go to {topic.topic}, and no subscription "
                "of this project reads it, so how long they are kept is unknown: pass "
                "--dead-letter-retention DURATION (that topic's subscription's message "
                "retention), or --force to delete anyway"
            )
    if not keeps:
        return
    longest = max(keeps, key=lambda keep: keep.retention)
    needed = window.span + longest.retention
    if older_than >= needed:
        return
    where = (
        f"dead-letter subscription {longest.subscription} (the dead letters of "
        f"{longest.source}) keeps a given-up event"
        if longest.subscription
        else "--dead-letter-retention says a given-up event is kept"
    )
    raise click.UsageError(
        f"--older-than {format_exact(older_than)} is shorter than what a redrive of a dead "
        f"letter may still need: {where} {format_exact(longest.retention)}, counted from when "
        f"it is dead-lettered, which can be as late as the end of the redelivery window "
        f"({window.describe()}); a redrive that finds no record runs the handler again. Use "
        f"--older-than {format_exact(needed)} or more, or --force to delete anyway."
    )
