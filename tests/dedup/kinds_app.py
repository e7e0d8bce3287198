"""Functions written the README's way (the platform's decorator over `@trigger_once`), one per
kind of event, served by functions-framework in `tests/dedup/test_kinds.py`. Each effect is an
increment of `effects/<delivery.key>.n`, so a doubled effect shows as n == 2."""

import time
from typing import Any

from firebase_functions import (
    alerts_fn,
    db_fn,
    eventarc_fn,
    remote_config_fn,
    scheduler_fn,
    storage_fn,
    test_lab_fn,
)
from firebase_functions.alerts import crashlytics_fn
from google.cloud import firestore

from dedup import Delivery, SuffixRegistry, trigger_once

REGISTRY = SuffixRegistry()
"""The test loads this file once per app; each load registers its suffixes afresh."""


def _effect(delivery: Delivery) -> None:
    delivery.client.document(f"effects/{delivery.key}").set(
        {"n": firestore.Increment(1), "subject": delivery.path}, merge=True
    )


@storage_fn.on_object_finalized(bucket="some-bucket")
@trigger_once("kStorage", registry=REGISTRY)
def on_upload(event: Any, delivery: Delivery) -> None:
    _effect(delivery)


@db_fn.on_value_written(reference="/users/{uid}")
@trigger_once("kDatabase", registry=REGISTRY)
def on_value(event: Any, delivery: Delivery) -> None:
    _effect(delivery)


@eventarc_fn.on_custom_event_published(event_type="com.example.order.paid")
@trigger_once("kCustom", registry=REGISTRY)
def on_custom(event: Any, delivery: Delivery) -> None:
    _effect(delivery)


@alerts_fn.on_alert_published(alert_type=alerts_fn.AlertType.CRASHLYTICS_NEW_NONFATAL_ISSUE)
@trigger_once("kAlert", registry=REGISTRY)
def on_alert(event: Any, delivery: Delivery) -> None:
    _effect(delivery)


@crashlytics_fn.on_new_fatal_issue_published()
@trigger_once("kFatal", registry=REGISTRY)
def on_fatal(event: Any, delivery: Delivery) -> None:
    _effect(delivery)


@remote_config_fn.on_config_updated()
@trigger_once("kConfig", registry=REGISTRY)
def on_config(event: Any, delivery: Delivery) -> None:
    _effect(delivery)


@test_lab_fn.on_test_matrix_completed()
@trigger_once("kTestLab", registry=REGISTRY)
def on_matrix(event: Any, delivery: Delivery) -> None:
    _effect(delivery)


@scheduler_fn.on_schedule(schedule="0 8 * * *")
@trigger_once("kSchedule", registry=REGISTRY)
def on_tick(event: Any, delivery: Delivery) -> None:
    _effect(delivery)


@storage_fn.on_object_finalized(bucket="slow-bucket")
@trigger_once("kSlow", registry=REGISTRY)
def on_slow_upload(event: Any, delivery: Delivery) -> None:
    """Works long enough for concurrent copies to find its lease live."""
    time.sleep(1.5)
    _effect(delivery)


@scheduler_fn.on_schedule(schedule="0 9 * * *")
@trigger_once("kSlowTick", registry=REGISTRY)
def on_slow_tick(event: Any, delivery: Delivery) -> None:
    """A scheduled run that works long enough for concurrent retries to find its lease live."""
    time.sleep(1.5)
    _effect(delivery)
