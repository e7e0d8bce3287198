"""The table of kinds (`dedup.kinds`) is the one place a kind is described: every row is
complete, no two rows claim a type, every decorator of firebase-functions lands on its row, and
a new row is all describe, the boundary and the deploy tool need to follow a new kind."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from cloudevents.http import CloudEvent
from firebase_functions import (
    alerts_fn,
    dataconnect_fn,
    db_fn,
    eventarc_fn,
    firestore_fn,
    pubsub_fn,
    remote_config_fn,
    storage_fn,
    test_lab_fn,
)
from firebase_functions.alerts import (
    app_distribution_fn,
    billing_fn,
    crashlytics_fn,
    performance_fn,
)

import dedup.kinds
from dedup import kinds
from dedup.kinds import KINDS, Kind, cloud_events, describe, kind_of
from dedup.kinds.base import cloud_event_reader, own_subject, sdk_reader
from functions import boundary
from tools.deploy.gcloud import trigger_flags
from tools.deploy.manifest import source_apis
from tools.deploy.target import Target

ROOT = Path(__file__).resolve().parents[2]


def _handler(event: Any) -> None:
    """A handler the decorators below wrap (never called)."""


EVERY_DECORATOR: dict[str, list[Any]] = {
    "firestore": [
        firestore_fn.on_document_written(document="a/{b}"),
        firestore_fn.on_document_created_with_auth_context(document="a/{b}"),
        firestore_fn.on_document_deleted(document="a/{b}"),
    ],
    "pubsub": [pubsub_fn.on_message_published(topic="t")],
    "storage": [
        storage_fn.on_object_finalized(bucket="b"),
        storage_fn.on_object_deleted(bucket="b"),
        storage_fn.on_object_archived(bucket="b"),
        storage_fn.on_object_metadata_updated(bucket="b"),
    ],
    "database": [
        db_fn.on_value_written(reference="/a/{b}"),
        db_fn.on_value_created(reference="/a/{b}"),
        db_fn.on_value_updated(reference="/a/{b}"),
        db_fn.on_value_deleted(reference="/a/{b}"),
    ],
    "alerts": [
        alerts_fn.on_alert_published(alert_type=alerts_fn.AlertType.CRASHLYTICS_NEW_FATAL_ISSUE),
        crashlytics_fn.on_new_fatal_issue_published(),
        billing_fn.on_plan_update_published(),
        performance_fn.on_threshold_alert_published(),
        app_distribution_fn.on_new_tester_ios_device_published(),
    ],
    "remote_config": [remote_config_fn.on_config_updated()],
    "test_lab": [test_lab_fn.on_test_matrix_completed()],
    "dataconnect": [dataconnect_fn.on_mutation_executed(service="s", connector="c", operation="o")],
    "custom": [eventarc_fn.on_custom_event_published(event_type="com.example.thing.v1")],
}
"""Event-trigger decorators of the pinned firebase-functions, by the kind they belong to."""


@pytest.mark.parametrize("name", sorted(EVERY_DECORATOR))
def test_every_event_decorator_lands_on_its_row(name: str) -> None:
    """The event type each decorator declares is found in the table, on the expected row."""
    for decorator in EVERY_DECORATOR[name]:
        endpoint = decorator(_handler).__firebase_endpoint__
        event_type = endpoint.eventTrigger["eventType"]
        assert kind_of(event_type).name == name, event_type


def test_every_row_is_complete_and_no_two_rows_claim_a_type() -> None:
    """Each row has its names, readers, retry and deploy; a type matches exactly one row."""
    names = [kind.name for kind in (*KINDS, kinds.SCHEDULE, kinds.CUSTOM)]
    assert len(names) == len(set(names))
    for kind in KINDS:
        assert kind.types
        assert callable(kind.read_event)
        assert callable(kind.read_cloud_event)
        assert kind.retry == "event"
        assert kind.body_limit > 0
        for event_type in kind.types:
            probe = event_type + "written" if event_type.endswith(".") else event_type
            assert [k.name for k in KINDS if k.has_type(probe)] == [kind.name]
    assert kinds.SCHEDULE.retry == "schedule"


def _imported_names(module: Any) -> set[str]:
    tree = ast.parse(inspect.getsource(module))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names |= {node.module or "", *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names


TRIGGER_MODULES = ("firestore_fn", "pubsub_fn", "scheduler_fn", "storage_fn", "db_fn")


def test_describe_and_the_boundary_look_kinds_up_instead_of_testing_types() -> None:
    """`describe` imports no trigger module of firebase-functions and makes no type check
    but the entry point's (a raw CloudEvent or the SDK's): the table decides. The boundary
    imports none either."""
    for module in (dedup.kinds, boundary):
        imported = _imported_names(module)
        assert not [n for n in imported if n.rsplit(".", 1)[-1] in TRIGGER_MODULES], module
    tree = ast.parse(inspect.getsource(describe))
    checks = [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance"
    ]
    assert sorted(checks) == [
        "isinstance(event, RawCloudEvent)",
        "isinstance(event, ff_core.CloudEvent)",
        "isinstance(event_type, str)",
    ]


AUDIT = Kind(
    "audit_logs",
    ("google.cloud.audit.log.v1.written",),
    sdk_reader(lambda subject, data: f"logs/{subject}"),
    cloud_event_reader(lambda subject, data: f"logs/{subject}"),
    apis=("logging.googleapis.com",),
)
"""A kind this table does not have, written as docs/usage.md says to add one."""


def test_a_new_row_is_all_a_new_kind_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    """With one row added, describe records its subject, the deploy tool enables its API and
    deploys its trigger by type, and `@validated` refuses it at import (it has no strict
    boundary); without the row, the same event is a custom event."""
    event = CloudEvent(
        {
            "id": "a1",
            "type": "google.cloud.audit.log.v1.written",
            "source": "//cloudaudit.googleapis.com/projects/p/logs/activity",
            "subject": "activity/x",
        },
        {"k": "v"},
    )
    assert describe(event).subject == "activity/x"  # no row yet: the CloudEvent's own subject
    monkeypatch.setattr(kinds, "KINDS", (*KINDS, AUDIT))
    info = describe(event)
    assert (info.event_id, info.subject) == ("a1", "logs/activity/x")
    assert json.loads(info.payload) == {"k": "v"}

    trigger = {"eventType": "google.cloud.audit.log.v1.written", "retry": True,
               "eventFilters": {"serviceName": "storage.googleapis.com"}}  # fmt: skip
    endpoint = {"eventTrigger": trigger}
    assert source_apis(endpoint) == ("logging.googleapis.com",)
    target = Target(project="p", region="europe-west1")
    flags = trigger_flags("audited", endpoint, target)
    assert "--trigger-event-filters=type=google.cloud.audit.log.v1.written" in flags
    assert "--trigger-event-filters=serviceName=storage.googleapis.com" in flags
    assert "--trigger-location=europe-west1" in flags
    assert "--retry" in flags

    function = eventarc_fn.on_custom_event_published(
        event_type="google.cloud.audit.log.v1.written"
    )(_handler)
    with pytest.raises(TypeError, match="no strict boundary for audit_logs events"):
        boundary.validated(function)


def test_validated_refuses_a_kind_without_strict_checks_at_import() -> None:
    """A Storage function under `@validated` fails when it is declared, naming the kind, not at
    its first event."""
    function = storage_fn.on_object_finalized(bucket="b")(_handler)
    with pytest.raises(TypeError, match="no strict boundary for storage events"):
        boundary.validated(function)


def test_the_deploy_tool_follows_the_rows() -> None:
    """Where a trigger sits and what names it come from its row: the bucket for Storage,
    `global` for alerts, the topic for Pub/Sub (no `--trigger-location`)."""
    target = Target(project="p", region="europe-west1")
    storage = {"eventTrigger": {"eventType": cloud_events.STORAGE_FINALIZED,
                                "eventFilters": {"bucket": "b"}, "region": "eu"}}  # fmt: skip
    assert trigger_flags("s", storage, target)[:1] == ["--trigger-bucket=b"]
    assert "--trigger-location=eu" in trigger_flags("s", storage, target)
    topic = {"eventTrigger": {"eventType": "google.cloud.pubsub.topic.v1.messagePublished",
                              "eventFilters": {"topic": "projects/p/topics/t"}}}  # fmt: skip
    flags = trigger_flags("t", topic, target)
    assert flags[0] == "--trigger-topic=t"
    assert not any(flag.startswith("--trigger-location") for flag in flags)
    assert kind_of(cloud_events.ALERT_TYPE).deploy.location == "global"
    assert own_subject("x", None) == "x"
