"""One function per event-trigger decorator of the pinned firebase-functions, each written the
README's way (the platform's decorator over `@trigger_once("<suffix>")`) with the same effect:
an increment of `effects/<delivery.key>.n`, so a doubled effect shows as n == 2.
`tests/dedup/test_every_decorator.py` serves each with functions-framework, as the gcloud path
serves it (the `cloudevent` signature)."""

from typing import Any

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
from google.cloud import firestore

from dedup import Delivery, SuffixRegistry, trigger_once

REGISTRY = SuffixRegistry()
"""The test loads this file once per app; each load registers its suffixes afresh."""

DECORATORS: dict[str, tuple[Any, str, dict[str, Any]]] = {
    "fs_written": (firestore_fn, "on_document_written", dict(document="things/{id}")),
    "fs_created": (firestore_fn, "on_document_created", dict(document="things/{id}")),
    "fs_updated": (firestore_fn, "on_document_updated", dict(document="things/{id}")),
    "fs_deleted": (firestore_fn, "on_document_deleted", dict(document="things/{id}")),
    "fs_written_auth": (
        firestore_fn,
        "on_document_written_with_auth_context",
        dict(document="things/{id}"),
    ),
    "fs_created_auth": (
        firestore_fn,
        "on_document_created_with_auth_context",
        dict(document="things/{id}"),
    ),
    "fs_updated_auth": (
        firestore_fn,
        "on_document_updated_with_auth_context",
        dict(document="things/{id}"),
    ),
    "fs_deleted_auth": (
        firestore_fn,
        "on_document_deleted_with_auth_context",
        dict(document="things/{id}"),
    ),
    "pubsub": (pubsub_fn, "on_message_published", dict(topic="things")),
    "storage_finalized": (storage_fn, "on_object_finalized", dict(bucket="some-bucket")),
    "storage_deleted": (storage_fn, "on_object_deleted", dict(bucket="some-bucket")),
    "storage_archived": (storage_fn, "on_object_archived", dict(bucket="some-bucket")),
    "storage_metadata": (storage_fn, "on_object_metadata_updated", dict(bucket="some-bucket")),
    "db_written": (db_fn, "on_value_written", dict(reference="/users/{uid}")),
    "db_created": (db_fn, "on_value_created", dict(reference="/users/{uid}")),
    "db_updated": (db_fn, "on_value_updated", dict(reference="/users/{uid}")),
    "db_deleted": (db_fn, "on_value_deleted", dict(reference="/users/{uid}")),
    "custom": (eventarc_fn, "on_custom_event_published", dict(event_type="com.example.order.paid")),
    "alert": (
        alerts_fn,
        "on_alert_published",
        dict(alert_type=alerts_fn.AlertType.CRASHLYTICS_NEW_FATAL_ISSUE),
    ),
    "crash_fatal": (crashlytics_fn, "on_new_fatal_issue_published", {}),
    "crash_nonfatal": (crashlytics_fn, "on_new_nonfatal_issue_published", {}),
    "crash_anr": (crashlytics_fn, "on_new_anr_issue_published", {}),
    "crash_regression": (crashlytics_fn, "on_regression_alert_published", {}),
    "crash_velocity": (crashlytics_fn, "on_velocity_alert_published", {}),
    "crash_digest": (crashlytics_fn, "on_stability_digest_published", {}),
    "billing_update": (billing_fn, "on_plan_update_published", {}),
    "billing_automated": (billing_fn, "on_plan_automated_update_published", {}),
    "performance": (performance_fn, "on_threshold_alert_published", {}),
    "appdist_device": (app_distribution_fn, "on_new_tester_ios_device_published", {}),
    "appdist_feedback": (app_distribution_fn, "on_in_app_feedback_published", {}),
    "remote_config": (remote_config_fn, "on_config_updated", {}),
    "test_lab": (test_lab_fn, "on_test_matrix_completed", {}),
    "dataconnect": (
        dataconnect_fn,
        "on_mutation_executed",
        dict(service="orders", connector="web", operation="placeOrder"),
    ),
}
"""Function name -> the module, name and arguments of the decorator it is written under."""


def _function(name: str, module: Any, decorator: str, arguments: dict[str, Any]) -> Any:
    def handler(event: Any, delivery: Delivery) -> None:
        delivery.client.document(f"effects/{delivery.key}").set(
            {"n": firestore.Increment(1), "function": name}, merge=True
        )

    handler.__name__ = handler.__qualname__ = name
    return getattr(module, decorator)(**arguments)(trigger_once(name, registry=REGISTRY)(handler))


for _name, (_module, _decorator, _arguments) in DECORATORS.items():
    globals()[_name] = _function(_name, _module, _decorator, _arguments)
