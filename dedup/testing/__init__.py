"""Test helpers for functions that use `dedup`: events as the platform delivers them, copies
of one delivery at once, and the Firestore emulator.

Nothing here is imported by `import dedup`; a test imports it: `from dedup import testing`.

**Events.** Each builder returns an `HttpEvent`: the headers and body of the HTTP request the
platform sends for that event, ready to POST (again and again) to a function served by
functions-framework (`functions-framework --target=NAME --signature-type=cloudevent`, or
`functions_framework.create_app(...).test_client()`). CloudEvents are in **binary content
mode**, as Eventarc delivers them: the attributes as `ce-*` headers, the data as the body
(`application/json`, or `application/protobuf` for Firestore's `DocumentEventData`).
`HttpEvent.structured()` gives the same event in structured content mode
(`application/cloudevents+json`, the data inline or as `data_base64`), which functions-framework
accepts as well. A scheduled run is not a CloudEvent: `scheduled_request` gives the Cloud
Scheduler request (its headers, an empty body) an `on_schedule` function is served as (the
`http` signature).

Builders, by the firebase-functions decorator they feed:

* `firestore_event`: `firestore_fn.on_document_*`, types
  `google.cloud.firestore.document.v1.{written,created,updated,deleted}`;
* `pubsub_event`: `pubsub_fn.on_message_published`, `google.cloud.pubsub.topic.v1.messagePublished`;
* `storage_event`: `storage_fn.on_object_*`,
  `google.cloud.storage.object.v1.{finalized,deleted,archived,metadataUpdated}`;
* `database_event`: `db_fn.on_value_*`,
  `google.firebase.database.ref.v1.{written,created,updated,deleted}`;
* `alert_event`: `alerts_fn` and `firebase_functions.alerts.*`,
  `google.firebase.firebasealerts.alerts.v1.published`;
* `remote_config_event`: `remote_config_fn.on_config_updated`,
  `google.firebase.remoteconfig.remoteConfig.v1.updated`;
* `matrix_event` (Test Lab): `test_lab_fn.on_test_matrix_completed`,
  `google.firebase.testlab.testMatrix.v1.completed`;
* `custom_event`: any type, `eventarc_fn.on_custom_event_published` (and Data Connect);
* `scheduled_request`: `scheduler_fn.on_schedule` (the Cloud Scheduler headers).

**Copies at once.** `deliver(url, event)` POSTs one copy and returns the HTTP status;
`deliver_concurrently(url, event, copies=6)` POSTs `copies` copies from as many threads at
once, the at-least-once platform at its worst; `deliver_until_done` retries as the platform
does until one copy is answered 2xx: it backs off between deliveries, waits long enough for a
crashed delivery's lease to expire (the lease of the `DedupConfig` it is given), and raises
`DeliveryGaveUp`, naming every status, when none is 2xx. They use the standard library only
(`urllib`); given `via_test_client(client)` instead of a URL they POST to a Flask test client
in-process.

**Through the Functions emulator.** A function the Firebase CLI's Functions emulator serves is
reached at its trigger route, `POST /functions/projects/<project>/triggers/<key>`, where the
key is `<region>-<name>-<generation>` (the generation counts the emulator's reloads of its
triggers). `emulator_trigger("welcome")` finds the current key and returns an
`EmulatorTrigger`, a `Target` for the functions above: it POSTs each CloudEvent in structured
content mode, the form that route passes on whatever the data (a binary-mode protobuf body,
such as `firestore_event`'s, makes it wait 60 s and fail).

**The Firestore emulator.** `firestore_emulator()` reads `FIRESTORE_EMULATOR_HOST`, for the
project a handler's `delivery.client` uses (`client_project()`: `GOOGLE_CLOUD_PROJECT`, else
`GCLOUD_PROJECT`, else the Firestore client's emulator default), so a test and the handler
share one database; settings that would split them are refused at once. Its `clear()` deletes
every document of the emulator's `(default)` database (the dedup records included) through
the emulator's REST endpoint, and `client()` opens a Firestore client on it.

**A crash at a durable step.** `crash_at_step(function, event, step=2, at=...)` delivers the
event to a `@trigger_once` function (under its firebase-functions decorator or not) once and
dies at a boundary of the second step the delivery runs, as a killed process would (a
`Crash`); `deliver_after_crash(...)` then delivers again once the lease expired and returns
that `Outcome`. `(deduplicator, event_id, suffix, handler)` runs a `handler(delivery)` instead.
A transactional step has no `after_step_call` (`BOUNDARIES_OF_KIND`): asked for it, the
delivery runs to its end and the `Crash` says so (docs/steps.md).

**Its modules**, each name above imported from here: `event` (`HttpEvent` and the CloudEvent
envelope the builders share), `firestore_builder` and `builders` (the events), `delivering`
(the copies at once), `emulator` (the trigger route and the Firestore emulator), `crashes`
(a crash at a durable step).
"""

from dedup.testing.builders import (
    PUBSUB_TYPE,
    DatabaseChange,
    StorageChange,
    alert_event,
    custom_event,
    database_event,
    matrix_event,
    pubsub_event,
    remote_config_event,
    scheduled_request,
    storage_event,
)
from dedup.testing.crashes import (
    BOUNDARIES_OF_KIND,
    STEP_BOUNDARIES,
    Crash,
    SimulatedCrash,
    crash_at_step,
    deliver_after_crash,
)
from dedup.testing.delivering import (
    DeliveryGaveUp,
    Target,
    deliver,
    deliver_concurrently,
    deliver_until_done,
    via_test_client,
)
from dedup.testing.emulator import (
    CLIENT_EMULATOR_PROJECT,
    DEFAULT_REGION,
    EmulatorTrigger,
    FirestoreEmulator,
    client_project,
    emulator_trigger,
    firestore_emulator,
)
from dedup.testing.event import DEFAULT_PROJECT, HttpEvent
from dedup.testing.firestore_builder import FIRESTORE_TYPES, FirestoreChange, firestore_event

__all__ = [
    "BOUNDARIES_OF_KIND",
    "CLIENT_EMULATOR_PROJECT",
    "DEFAULT_PROJECT",
    "DEFAULT_REGION",
    "FIRESTORE_TYPES",
    "PUBSUB_TYPE",
    "STEP_BOUNDARIES",
    "Crash",
    "DatabaseChange",
    "DeliveryGaveUp",
    "EmulatorTrigger",
    "FirestoreChange",
    "FirestoreEmulator",
    "HttpEvent",
    "SimulatedCrash",
    "StorageChange",
    "Target",
    "alert_event",
    "client_project",
    "crash_at_step",
    "custom_event",
    "database_event",
    "deliver",
    "deliver_after_crash",
    "deliver_concurrently",
    "deliver_until_done",
    "emulator_trigger",
    "firestore_emulator",
    "firestore_event",
    "matrix_event",
    "pubsub_event",
    "remote_config_event",
    "scheduled_request",
    "storage_event",
    "via_test_client",
]
