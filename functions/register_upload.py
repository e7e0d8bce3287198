"""`register_upload`: account for each file uploaded under `uploads/<uid>/` of the default bucket.

Fires on every object finalized in the project's default Cloud Storage bucket, or the one
`UPLOAD_BUCKET` names at deploy time (firebase-functions cannot filter a Storage trigger by
path). An object named `uploads/<uid>/<anything>`, with `<uid>` a valid Firestore document id
(`functions.ids`), adds its size to `users/<uid>.uploadedBytes` and writes `uploads/<object
id>`, the object id (`<bucket>/<name>/<generation>`) with each `/` written `%2F` so it is one
document id. Any other object is ignored: an INFO line, nothing deduplicated, nothing written.

Exactly once per object generation, transactional mode: each generation is finalized by one
event, and the increment, the upload document and the dedup marker commit in one Firestore
transaction, so a redelivered event finds the marker and a crashed one left nothing behind.
"""

from __future__ import annotations

import logging
from urllib.parse import quote

from firebase_functions import params, storage_fn
from google.cloud.firestore import SERVER_TIMESTAMP, Increment

from dedup import Delivery, Mode, trigger_once
from functions.ids import is_document_id

SUFFIX = "register_upload"
PREFIX = "uploads/"
BUCKET_VARIABLE = "UPLOAD_BUCKET"
"""Names the watched bucket at deploy time; empty (the default): the project's default bucket,
`<project>.firebasestorage.app` (`tools/deploy` fills it in, docs/deploy.md)."""
logger = logging.getLogger(__name__)

UploadEvent = storage_fn.CloudEvent[storage_fn.StorageObjectData]


def uploader(name: str) -> str | None:
    """The uid of an object named `uploads/<uid>/<file>`, else None."""
    if not name.startswith(PREFIX):
        return None
    uid, slash, rest = name.removeprefix(PREFIX).partition("/")
    return uid if slash and rest and is_document_id(uid) else None


def upload_document_id(data: storage_fn.StorageObjectData) -> str:
    """The `uploads/` document id of one object generation: its object id, `/` quoted."""
    object_id = data.id or f"{data.bucket}/{data.name}/{data.generation}"
    return quote(object_id, safe="")


@trigger_once(SUFFIX, mode=Mode.TRANSACTION)
def _register_once(event: UploadEvent, delivery: Delivery) -> None:
    data = event.data
    uid = uploader(data.name)
    assert uid is not None, "register_upload passes only uploads/<uid>/ objects"
    transaction = delivery.transaction
    assert transaction is not None, "transactional mode always passes a transaction"
    size = int(data.size or 0)
    client = delivery.client
    transaction.set(
        client.collection("users").document(uid), {"uploadedBytes": Increment(size)}, merge=True
    )
    transaction.set(
        client.collection("uploads").document(upload_document_id(data)),
        {
            "uid": uid,
            "bucket": data.bucket,
            "name": data.name,
            "generation": str(data.generation),
            "size": size,
            "contentType": data.content_type,
            "registeredAt": SERVER_TIMESTAMP,
        },
    )


@storage_fn.on_object_finalized(bucket=params.StringParam(BUCKET_VARIABLE, default=""))
def register_upload(event: UploadEvent) -> None:
    """Register an object under `uploads/<uid>/` once per generation; ignore any other."""
    if uploader(event.data.name) is None:
        logger.info("object %s is not under uploads/<uid>/: ignored", event.data.name)
        return
    _register_once(event)
