"""`dedup dead-letters list` and `dedup dead-letters redrive`: the events Pub/Sub gave up on, on
the Cloud Run path (`<service>-dead-letter`, docs/deploy.md).

`list` pulls the messages and gives every one back at once (`modifyAckDeadline` 0): nothing is
removed. `redrive` posts each message's rebuilt request (`dead_letter_events.redrive_request`)
to `--to URL` and acks a message only after a 2xx answer; a message that cannot be rebuilt, or
that the service answers otherwise, or that cannot be reached, is reported and given back, and
the command exits 1. Both talk to the Pub/Sub emulator when PUBSUB_EMULATOR_HOST is set
(`pubsub_rest.PubSub.connect`).

Authentication of the POST: outside the emulator, and unless the URL's host is the local
machine, with an ID token whose audience is the URL's origin (`https://SERVICE-NUMBER.REGION.
run.app`, what Cloud Run checks), from google-auth's `fetch_id_token` (a service account key
in GOOGLE_APPLICATION_CREDENTIALS, or the metadata server), or `--id-token`; no token to the
emulator or a local server, which check none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import click
import requests
from rich.table import Table

from dedup.cli.dead_letter_events import (
    NotACloudEvent,
    Redrive,
    delivery_count,
    is_cloud_event,
    redrive_request,
    source_subscription,
)
from dedup.cli.pubsub_rest import Message, PubSub, subscription_name
from dedup.cli.render import cell, console, echo_json, json_option
from dedup.cli.target import Target

PULL_BATCH = 10
"""Messages pulled at once."""
DEFAULT_LIMIT = 100
"""Messages `list` and `redrive` handle unless `--limit` says otherwise."""
DEFAULT_TIMEOUT = 540
"""How long `redrive` waits for the service's answer (the longest timeout a function on this
path may have is 600 s, Pub/Sub's longest ack deadline)."""
LEASE_MARGIN = 60
"""Seconds a message stays leased beyond the POST's timeout while it is redriven."""
MAX_ACK_DEADLINE = 600
"""Pub/Sub's longest ack deadline."""
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
"""Hosts that get no ID token."""


@click.group(name="dead-letters")
def dead_letters() -> None:
    """List and redrive the events Pub/Sub dead-lettered (Cloud Run path).

    SUBSCRIPTION is a dead-letter subscription, <service>-dead-letter for a function deployed
    with `make deploy-run` (with --project), or projects/PROJECT/subscriptions/ID.
    """


@dataclass(frozen=True)
class Row:
    """One dead-lettered message as `list` and `redrive` show it."""

    message: Message
    """The message pulled."""
    redrive: Redrive | None
    """Its rebuilt request, or None when it cannot be rebuilt."""
    problem: str | None
    """Why it cannot be rebuilt."""

    def as_json(self) -> dict[str, Any]:
        """What `--json` prints for this message."""
        event = self.redrive
        return {
            "messageId": self.message.message_id,
            "publishTime": self.message.publish_time,
            "deliveryCount": delivery_count(self.message),
            "sourceSubscription": source_subscription(self.message),
            "eventId": event.event_id if event else None,
            "type": event.event_type if event else None,
            "source": event.source if event else None,
            "subject": event.subject if event else None,
            "problem": self.problem,
        }


class Topics:
    """The topic of each source subscription, asked once per subscription."""

    def __init__(self, pubsub: PubSub) -> None:
        self.pubsub = pubsub
        """Where the subscriptions are read."""
        self.known: dict[str, str | None] = {}
        """Subscription -> its topic (None: it could not be read)."""

    def of(self, message: Message) -> str | None:
        """The topic of the subscription `message` was dead-lettered from; None when the message
        is a CloudEvent (no topic needed), names none, or it cannot be read."""
        subscription = source_subscription(message)
        if subscription is None or is_cloud_event(message):
            return None
        if subscription not in self.known:
            try:
                topic = self.pubsub.subscription(subscription).get("topic")
            except click.ClickException:
                topic = None
            self.known[subscription] = topic if isinstance(topic, str) else None
        return self.known[subscription]


def row_of(message: Message, topics: Topics) -> Row:
    """The message and its rebuilt request, or the reason it has none."""
    try:
        return Row(message, redrive_request(message, topics.of(message)), None)
    except NotACloudEvent as exc:
        return Row(message, None, str(exc))


def pulled(pubsub: PubSub, subscription: str, limit: int) -> Iterator[Message]:
    """Up to `limit` messages of the subscription, each pulled once: a pulled message stays
    leased to this command until it is acked or given back, so the next pull skips it."""
    handed = 0
    while handed < limit:
        batch = pubsub.pull(subscription, min(PULL_BATCH, limit - handed))
        if not batch:
            return
        for message in batch[: limit - handed]:
            handed += 1
            yield message


subscription_argument = click.argument("subscription", metavar="SUBSCRIPTION")
limit_option = click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=DEFAULT_LIMIT,
    show_default=True,
    help="Most messages.",
)


@dead_letters.command(name="list")
@subscription_argument
@limit_option
@json_option
@click.pass_obj
def list_dead_letters(target: Target, subscription: str, limit: int, as_json: bool) -> None:
    """List dead-lettered events without removing them.

    Each message is pulled and given back at once (ack deadline 0): it stays on SUBSCRIPTION.
    """
    name = subscription_name(subscription, target.project)
    pubsub = PubSub.connect()
    topics = Topics(pubsub)
    messages = list(pulled(pubsub, name, limit))
    pubsub.modify_ack_deadline(name, [m.ack_id for m in messages], 0)
    rows = [row_of(m, topics) for m in messages]
    if as_json:
        echo_json([row.as_json() for row in rows])
        return
    if not rows:
        click.echo(f"no dead-lettered messages on {name}")
        return
    table = Table(title=f"{len(rows)} dead-lettered on {name}")
    for column in ("event id", "type", "source / subject", "published", "deliveries", "message"):
        table.add_column(column)
    for row in rows:
        event = row.redrive
        where = f"{event.source} {event.subject or ''}".strip() if event else row.problem
        table.add_row(
            cell(event.event_id if event else "-"),
            cell(event.event_type if event else "not a CloudEvent"),
            cell(where),
            cell(row.message.attributes.get("CloudPubSubDeadLetterSourceTopicPublishTime")
                 or row.message.publish_time),
            cell(delivery_count(row.message)),
            cell(row.message.message_id),
        )  # fmt: skip
    console().print(table)


def target_url(url: str) -> str:
    """`url` when it is an http(s) URL with a host; `click.BadParameter` otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise click.BadParameter(
            f"{url!r} is not an http(s) URL: give the service's URL, e.g. "
            "https://SERVICE-PROJECT_NUMBER.REGION.run.app",
            param_hint="--to",
        )
    return url


def needs_token(url: str, emulator: bool) -> bool:
    """True unless the Pub/Sub emulator is used or `url`'s host is the local machine."""
    return not emulator and urlsplit(url).hostname not in LOCAL_HOSTS


def id_token_for(url: str, audience: str | None) -> str:
    """An ID token for `audience` (default: `url`'s origin) from google-auth's
    `fetch_id_token`; a click error naming the fixes when there is none."""
    import google.auth.exceptions
    import google.auth.transport.requests
    import google.oauth2.id_token

    parts = urlsplit(url)
    audience = audience or f"{parts.scheme}://{parts.netloc}"
    try:
        request = google.auth.transport.requests.Request()
        fetch: Callable[[Any, str], str] = google.oauth2.id_token.fetch_id_token  # untyped upstream
        return str(fetch(request, audience))
    except google.auth.exceptions.GoogleAuthError as exc:
        raise click.ClickException(
            f"no ID token for {audience} ({' '.join(str(exc).split())}): run where a service "
            "account's credentials are found (GOOGLE_APPLICATION_CREDENTIALS=key.json, or on "
            'Google Cloud), or pass --id-token "$(gcloud auth print-identity-token)"'
        ) from exc


@dead_letters.command(name="redrive")
@subscription_argument
@click.option("--to", "url", required=True, metavar="URL", help="The service's URL.")
@limit_option
@click.option(
    "--timeout",
    type=click.IntRange(1, DEFAULT_TIMEOUT),
    default=DEFAULT_TIMEOUT,
    show_default=True,
    help="Seconds to wait for each answer.",
)
@click.option("--id-token", metavar="TOKEN", help="Send this ID token instead of fetching one.")
@click.option("--audience", metavar="URL", help="The ID token's audience. [default: URL's origin]")
@click.pass_obj
def redrive(
    target: Target,
    subscription: str,
    url: str,
    limit: int,
    timeout: int,
    id_token: str | None,
    audience: str | None,
) -> None:
    """Deliver dead-lettered events to their service again; ack each only after a 2xx.

    Each message becomes the CloudEvent request Eventarc sent (docs/deploy.md), POSTed to URL.
    A message that is no CloudEvent, or that the service answers with anything but 2xx, stays
    on SUBSCRIPTION and is reported; the exit status is then 1. An event the service already
    handled is answered 2xx without a second effect (its dedup record says so).
    """
    url = target_url(url)
    name = subscription_name(subscription, target.project)
    pubsub = PubSub.connect()
    headers: dict[str, str] = {}
    token = id_token or (id_token_for(url, audience) if needs_token(url, pubsub.emulator) else None)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    topics = Topics(pubsub)
    lease = min(timeout + LEASE_MARGIN, MAX_ACK_DEADLINE)
    kept: list[str] = []
    done = 0
    try:
        for message in pulled(pubsub, name, limit):
            row = row_of(message, topics)
            if row.redrive is None:
                kept.append(message.ack_id)
                click.echo(f"left {message.message_id}: {row.problem}", err=True)
                continue
            pubsub.modify_ack_deadline(name, [message.ack_id], lease)
            status = _post(url, row.redrive, headers, timeout)
            label = f"{row.redrive.event_type} {row.redrive.event_id}"
            if isinstance(status, int) and 200 <= status < 300:
                pubsub.acknowledge(name, [message.ack_id])
                done += 1
                click.echo(f"redriven {label}: {status}")
            else:
                kept.append(message.ack_id)
                click.echo(f"left {label} (message {message.message_id}): {status}", err=True)
    finally:
        pubsub.modify_ack_deadline(name, kept, 0)
    click.echo(f"{done} redriven, {len(kept)} left on {name}")
    if kept:
        raise SystemExit(1)


def _post(url: str, event: Redrive, auth: dict[str, str], timeout: int) -> int | str:
    """The service's 2xx status, or what went wrong on the way (a status with the start of the
    answer's body)."""
    try:
        response = requests.post(
            url, data=event.body, headers={**event.headers, **auth}, timeout=timeout
        )
    except requests.Timeout:
        return f"no answer within {timeout} s"
    except requests.RequestException as exc:
        return f"not delivered ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
    if 200 <= response.status_code < 300:
        return response.status_code
    return f"{response.status_code} {' '.join(response.text.split())[:200]}".strip()
