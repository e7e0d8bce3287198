"""Secrets in receiver URLs never reach logs or dedup records.

Webhook routes and NOTIFY_URL often carry credentials (`https://user:pw@host/...`) or tokens in
the query string. The functions are served as on Cloud Run, their receivers fail in every way
that produces an error message, and then the function's whole output and every record in
Firestore are searched for the secrets.
"""

from __future__ import annotations

import json
from pathlib import Path

from google.cloud import firestore

from demo.events import firestore_event, pubsub_event
from demo.receiver import Receiver
from demo.serve import free_port, served_function
from tests.conftest import PROJECT

PASSWORD, TOKEN = "s3cret-pw", "t0ken-value"


def secret_url(base: str) -> str:
    scheme, rest = base.split("://", 1)
    return f"{scheme}://robot:{PASSWORD}@{rest}?token={TOKEN}"


def test_receiver_secrets_stay_out_of_logs_and_records(
    firestore_client: firestore.Client, receiver: Receiver, tmp_path: Path
) -> None:
    """Refused connections, 503s and 400s from receivers whose URLs hold a password and a
    token: the errors are recorded and logged, the secrets nowhere."""
    closed = f"http://127.0.0.1:{free_port()}/hook"
    env = {
        "WEBHOOK_ROUTES": json.dumps(
            {
                "default": secret_url(closed),
                "busy": secret_url(f"{receiver.base_url}/busy"),
                "refuses": secret_url(f"{receiver.base_url}/refuses"),
            }
        ),
        "NOTIFY_URL": secret_url(f"{receiver.base_url}/notify"),
    }
    receiver.fail("/busy", 503, times=1)
    receiver.fail("/refuses", 400, times=1)
    receiver.fail("/notify", 503, times=1)
    firestore_client.document("users/ann").set({"followers": ["ben"]})
    firestore_client.document("users/ben").set({"fcmToken": "token-ben"})
    post = firestore_client.document("posts/p1")
    post.set({"authorId": "ann", "published": True})
    log = tmp_path / "functions.log"

    with served_function("forward_webhook", env, log=log) as webhook:
        for n, route in enumerate(["default", "busy", "refuses"]):
            event = pubsub_event(
                "webhooks", b"{}", project=PROJECT, message_id=f"m{n}", attributes={"route": route}
            )
            webhook.deliver(event)
    with served_function("send_post_notification", env, log=log) as notify:
        notify.deliver(firestore_event(post.path, None, post.get(), project=PROJECT))

    records = [d.to_dict() or {} for d in firestore_client.collection("triggerEvents").stream()]
    errors = [r.get("lastError") or "" for r in records]
    assert sum(1 for e in errors if e) == 4, records  # refused, 503, 400 and the notice's 503
    output = log.read_text()
    assert "Traceback" in output, "the retryable failures were logged with their traceback"
    for secret in (PASSWORD, TOKEN, "robot:"):
        assert secret not in output
        assert not any(secret in e for e in errors)
