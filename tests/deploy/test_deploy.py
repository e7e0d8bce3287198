"""Deployment without a cloud: what `firebase deploy` would read, and what gcloud would be told.

The manifest is the one `make deploy-firebase` hands the Firebase CLI; the gcloud commands are
the ones `make -n deploy-gcloud` prints, each run against the installed gcloud with no
credentials, which parses every argument before it asks for an account.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
FIRESTORE_WRITTEN = "google.cloud.firestore.document.v1.written"
FIRESTORE_CREATED = "google.cloud.firestore.document.v1.created"
PUBSUB_PUBLISHED = "google.cloud.pubsub.topic.v1.messagePublished"
EXPECTED_TRIGGERS = {
    "sync_published_count": (FIRESTORE_WRITTEN, "posts/{postId}"),
    "send_post_notification": (FIRESTORE_WRITTEN, "posts/{postId}"),
    "relay_outbox": (FIRESTORE_CREATED, "outbox/{outboxId}"),
    "forward_webhook": (PUBSUB_PUBLISHED, "webhooks"),
}
EXPECTED_HTTP = {
    "create_order": "httpsTrigger",
    "create_order_callable": "callableTrigger",
    "receive_line_webhook": "httpsTrigger",
}
"""The HTTP functions (docs/http.md): public, guarded by their own checks."""


def trigger_of(endpoint: dict[str, Any]) -> tuple[str, str]:
    """(event type, document pattern or topic) of a manifest endpoint."""
    trigger = endpoint["eventTrigger"]
    filters = {**trigger.get("eventFilters", {}), **trigger.get("eventFilterPathPatterns", {})}
    return trigger["eventType"], filters.get("document") or filters["topic"].rsplit("/", 1)[-1]


def test_manifest_declares_the_functions_with_retries_on() -> None:
    """`firebase deploy` gets exactly the functions, the event functions' triggers with retry
    on, the HTTP functions public and the LINE channel secret from Secret Manager."""
    # A fresh process, as the Firebase CLI's discovery uses.
    printed = subprocess.run(
        [sys.executable, "tools/deploy.py", "manifest"], cwd=ROOT, capture_output=True, text=True,
        check=True,
    ).stdout  # fmt: skip
    manifest = yaml.safe_load(printed)
    endpoints = manifest["endpoints"]
    assert set(endpoints) == set(EXPECTED_TRIGGERS) | set(EXPECTED_HTTP)
    line_secrets = manifest["endpoints"]["receive_line_webhook"]["secretEnvironmentVariables"]
    assert [s["key"] for s in line_secrets] == ["LINE_CHANNEL_SECRET"]
    for name, kind in EXPECTED_HTTP.items():
        http = endpoints.pop(name)
        assert kind in http, name
        if kind == "httpsTrigger":  # callables are public by default
            assert http[kind].get("invoker") == ["public"], name
    for name, endpoint in endpoints.items():
        assert endpoint["entryPoint"] == name
        assert trigger_of(endpoint) == EXPECTED_TRIGGERS[name]
        assert endpoint["eventTrigger"]["retry"] is True, name


def gcloud_commands(target: str) -> list[list[str]]:
    """The gcloud commands `make -n TARGET` would run, as argument lists."""
    printed = subprocess.run(
        ["make", "-n", target, "PROJECT=demo-parse-only", "REGION=us-central1"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    commands = []
    for line in printed.replace("\\\n", " ").splitlines():
        for part in line.replace("||", ";").split(";"):
            words = [w for w in shlex.split(part) if not w.startswith((">", "2>"))]
            if "gcloud" in words:
                commands.append(words[words.index("gcloud") :])
    return commands


def test_every_event_function_is_deployed_with_retry_by_gcloud() -> None:
    """`make deploy-gcloud` deploys the four functions, each with --retry and its trigger."""
    deploys = {
        next(w for w in cmd[3:] if not w.startswith("-")): cmd
        for cmd in gcloud_commands("deploy-gcloud")
    }
    assert set(deploys) == set(EXPECTED_TRIGGERS)
    for name, cmd in deploys.items():
        assert "--retry" in cmd, name
        assert {"--gen2", "--runtime=python312"} <= set(cmd)
        assert f"--entry-point={name}" in cmd
        event_type, where = EXPECTED_TRIGGERS[name]
        if event_type == PUBSUB_PUBLISHED:
            assert f"--trigger-topic={where}" in cmd
        else:
            assert f"--trigger-event-filters=type={event_type}" in cmd
            assert f"--trigger-event-filters-path-pattern=document={where}" in cmd


@pytest.mark.skipif(
    shutil.which("gcloud") is None,
    reason="the Google Cloud CLI (optional, for make deploy-gcloud) is not installed here",
)
@pytest.mark.parametrize("target", ["deploy-gcloud", "ttl", "topics"])
def test_gcloud_accepts_every_argument(target: str, tmp_path: Path) -> None:
    """Each command fails only for want of credentials, never for an argument gcloud refuses."""
    # The env file gcloud reads (the first step of deploy-gcloud): a file that must exist.
    (ROOT / ".cache").mkdir(exist_ok=True)
    (ROOT / ".cache" / "env.demo-parse-only.yaml").write_text(
        "FUNCTION_SIGNATURE_TYPE: cloudevent\n"
    )
    env = {**os.environ, "CLOUDSDK_CONFIG": str(tmp_path), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"}
    commands = gcloud_commands(target)
    assert commands, f"make -n {target} printed no gcloud command"
    for cmd in commands:
        result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode != 0, cmd
        assert "active account" in result.stderr, (cmd, result.stderr[-600:])
        assert "unrecognized arguments" not in result.stderr, cmd
