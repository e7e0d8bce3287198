from firebase_functions import firestore_fn
from google.cloud import firestore

@firestore_fn.on_document_written(document="posts/{postId}")
def spike(event: firestore_fn.Event) -> None:
    print("SPIKE EVENT", event.id, event.document)
    firestore.Client(project="demo-exactly-once").collection("spike").document(event.id).set({"ok": True})
