"""CloudEvents as Google's platform delivers them, built from real emulator state.

The demo and the tests play the at-least-once platform: they take a document snapshot read
from the Firestore emulator, or a message published to the Pub/Sub emulator, build the
CloudEvent Eventarc would deliver for it, and deliver that same event several times.

The builders are the library's own (`dedup.testing`, which a team testing its functions
imports as well), re-exported here under the names the demo and the tests use:

* Firestore: binary content mode, `application/protobuf` body (`DocumentEventData`), and the
  attributes `location`, `project`, `database`, `namespace`, `document` that
  firebase-functions reads.
* Pub/Sub: `application/json` body `{"message": {...}, "subscription": ...}` carrying the
  message id under both spellings, as the push endpoint does.
"""

from __future__ import annotations

from dedup.testing import (
    FIRESTORE_TYPES,
    PUBSUB_TYPE,
    FirestoreChange,
    HttpEvent,
    firestore_event,
    pubsub_event,
)

__all__ = [
    "FIRESTORE_TYPES",
    "PUBSUB_TYPE",
    "FirestoreChange",
    "HttpEvent",
    "firestore_event",
    "pubsub_event",
]
