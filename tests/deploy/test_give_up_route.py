"""The whole route of an event dedup gives up on, on the Cloud Run path, on the Pub/Sub emulator:
a handler that always fails ends on the trigger's dead-letter subscription with its CloudEvent;
after the fix, the runbook's commands (docs/operations.md, "Dead letters on the Cloud Run
path"), run as typed, give exactly one effect.

`forward_webhook` is served as its Cloud Run service is (`tests.deploy.test_run_served.serving`:
only the variables the plan gives it, so `DEDUP_ON_GIVE_UP=nack` comes from the plan's env
file), behind a push subscription with a dead-letter policy, through `Eventarc` (the emulator's
push is Pub/Sub's own JSON; Eventarc turns it into the CloudEvent, as in
`tests/deploy/test_dead_letters.py`). dedup's attempts are 2 and Pub/Sub's 5, its least, with
a 1-2 s backoff: the route takes seconds instead of an hour.
"""

from __future__ import annotations

import json
import re
import shlex
import uuid
from collections.abc import Iterator
from contextlib import suppress
from datetime import datetime
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner
from google.cloud import firestore

from dedup import testing
from dedup.cli import cli
from dedup.kernel.record import Record, State
from dedup.kernel.transitions import dedup_key
from demo.receiver import Receiver
from tests.conftest import FUNCTION_ENV
from tests.deploy.test_dead_letters import (
    PUBSUB_PROJECT,
    ROUTE,
    TOPIC,
    Eventarc,
    eventarc_endpoint,
    listed,
    publish,
    rest,
    suppress_conflict,
    wait_for,
)
from tests.deploy.test_run_served import platform_environment, serving
from tools.run_service import DEAD_LETTER_RETENTION

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
SECTION = "## Dead letters on the Cloud Run path"
DEDUP_ATTEMPTS = 2
PUBSUB_ATTEMPTS = 5
SUFFIX = "forward_webhook"


def runbook_commands() -> list[str]:
    """The `dedup` commands of the runbook's section on the Cloud Run path's dead letters (its
    indented blocks), in order."""
    text = RUNBOOK.read_text()
    start = text.index(SECTION)
    section = text[start : text.index("\n## ", start + len(SECTION))]
    return [m.strip() for m in re.findall(r"^    (dedup .+)$", section, re.MULTILINE)]


@pytest.fixture
def service_name() -> Iterator[str]:
    """This test's service name (unique), whose push subscription, dead-letter topic and
    dead-letter subscription are deleted at its end."""
    service = f"forward-webhook-{uuid.uuid4().hex[:8]}"
    yield service
    base = f"projects/{PUBSUB_PROJECT}"
    for name in (f"subscriptions/{service}", f"subscriptions/{service}-dead-letter",
                 f"topics/{service}-dead-letter"):  # fmt: skip
        with suppress(requests.HTTPError):
            rest("DELETE", f"{base}/{name}")


def test_an_event_given_up_on_is_dead_lettered_and_redriven_once_after_the_fix(
    tmp_path: Path,
    service_name: str,
    receiver: Receiver,
    firestore_client: firestore.Client,
) -> None:
    """The receiver refuses every request (503): the handler fails twice, dedup records the
    event `dead`, and every delivery from that one on is answered 500 without running it, so
    Pub/Sub dead-letters it after its 5 attempts; the dead letter carries the CloudEvent. Then
    the receiver is fixed and the runbook's commands run as typed: `list` shows it, a redrive
    before the revive leaves it (naming the key to revive), `revive` hands it back, the redrive
    makes exactly one effect; a second dead letter of it, redriven, makes none. Its record,
    kept as the plan's `DEDUP_RETENTION_DAYS` says, expires no sooner than its dead letter does
    on a subscription of the plan (`DEAD_LETTER_RETENTION` from the letter's arrival)."""
    commands = runbook_commands()
    assert [shlex.split(c)[1] for c in commands] == ["dead-letters", "list", "revive",
                                                     "dead-letters"]  # fmt: skip
    base = f"projects/{PUBSUB_PROJECT}"
    topic, push = f"{base}/topics/{TOPIC}", f"{base}/subscriptions/{service_name}"
    dead_topic = f"{base}/topics/{service_name}-dead-letter"
    dead = f"{base}/subscriptions/{service_name}-dead-letter"
    event_key = f"order-{uuid.uuid4().hex[:8]}"
    key = dedup_key(event_key, SUFFIX)
    records = firestore.Client(project=PUBSUB_PROJECT).collection("triggerEvents")

    def state() -> State | None:
        record = Record.from_snapshot(records.document(key).get())
        return None if record is None else record.state

    receiver.fail(ROUTE, 503, times=1000)
    with suppress_conflict():
        rest("PUT", topic)
    rest("PUT", dead_topic)
    rest("PUT", dead, {"topic": dead_topic, "ackDeadlineSeconds": 60})
    settings = {
        "GOOGLE_CLOUD_PROJECT": PUBSUB_PROJECT,
        "GCLOUD_PROJECT": PUBSUB_PROJECT,
        "DEDUP_MAX_ATTEMPTS": str(DEDUP_ATTEMPTS),
        "DEDUP_MIN_RETRY_SECONDS": "0",
    }
    extra = {**FUNCTION_ENV, **settings}
    assert platform_environment(0, SUFFIX, extra)["DEDUP_ON_GIVE_UP"] == "nack"  # the plan's
    with serving(tmp_path / "server.log", SUFFIX, extra) as service:
        eventarc = Eventarc(service, TOPIC)
        with eventarc_endpoint(eventarc) as push_url:
            rest("PUT", push, {
                "topic": topic, "ackDeadlineSeconds": 10,
                "pushConfig": {"pushEndpoint": push_url},
                "retryPolicy": {"minimumBackoff": "1s", "maximumBackoff": "2s"},
                "deadLetterPolicy": {"deadLetterTopic": dead_topic,
                                     "maxDeliveryAttempts": PUBSUB_ATTEMPTS},
            })  # fmt: skip
            body = b'{"events": [{"type": "message", "text": "hi"}]}'
            publish(topic, body, {"eventKey": event_key})

            wait_for(lambda: listed(dead), 90, "the dead letter")
            assert eventarc.pushes == PUBSUB_ATTEMPTS
            assert eventarc.answers == [500] * PUBSUB_ATTEMPTS
            assert len(receiver.attempts_to(ROUTE)) == DEDUP_ATTEMPTS  # nothing ran after
            assert state() is State.DEAD

            receiver.script(ROUTE)  # the fix: 200 from now on
            run = CliRunner(env={"GOOGLE_CLOUD_PROJECT": PUBSUB_PROJECT, "COLUMNS": "200"})

            def typed(command: str) -> list[str]:
                url = "https://SERVICE-PROJECT_NUMBER.REGION.run.app"
                text = command.replace(url, service).replace("SERVICE", service_name)
                return shlex.split(text.replace("SUFFIX", SUFFIX))[1:]

            listing, records_list, revive, redrive = (typed(c) for c in commands)
            shown = run.invoke(cli, [*listing, "--json"])
            assert shown.exit_code == 0, shown.output
            [letter] = rows_of(shown.output)
            assert letter["type"] == testing.PUBSUB_TYPE
            assert letter["source"] == f"//pubsub.googleapis.com/{topic}"
            assert letter["deliveryCount"] == PUBSUB_ATTEMPTS
            assert letter["sourceSubscription"] == push
            record = Record.from_snapshot(records.document(key).get())
            assert record is not None
            assert record.expire_at is not None
            arrived = datetime.fromisoformat(str(letter["publishTime"]))
            assert record.expire_at >= arrived + DEAD_LETTER_RETENTION, (record, arrived)
            found = run.invoke(cli, records_list)
            assert found.exit_code == 0, found.output
            assert event_key in found.output

            early = run.invoke(cli, redrive)  # before the revive: still given up on
            assert early.exit_code == 1, early.output
            assert "0 redriven, 1 left" in early.output
            assert f"500 {key} is given up on" in early.output
            assert receiver.applied(ROUTE) == []

            revived = run.invoke(cli, revive, input="y\n")
            assert revived.exit_code == 0, revived.output
            assert re.search(r"revived [1-9]\d* record", revived.output), revived.output
            done = run.invoke(cli, redrive)
            assert done.exit_code == 0, done.output
            assert "1 redriven, 0 left" in done.output
            [effect] = receiver.applied(ROUTE)
            assert effect.idempotency_key == key
            assert effect.body == body
            assert state() is State.SENT
            assert rows_of(run.invoke(cli, [*listing, "--json"]).output) == []

            # Pub/Sub dead-letters best effort: the same message may arrive twice.
            forwarded = {
                "eventKey": event_key,
                "CloudPubSubDeadLetterSourceDeliveryCount": str(PUBSUB_ATTEMPTS),
                "CloudPubSubDeadLetterSourceSubscription": service_name,
                "CloudPubSubDeadLetterSourceSubscriptionProject": PUBSUB_PROJECT,
            }
            publish(dead_topic, body, forwarded)
            again = run.invoke(cli, redrive)
            assert again.exit_code == 0, again.output
            assert len(receiver.applied(ROUTE)) == 1


def rows_of(output: str) -> list[dict[str, object]]:
    """The rows `dedup dead-letters list --json` printed."""
    return list(json.loads(output))
