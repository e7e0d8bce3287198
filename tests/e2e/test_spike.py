import time

from google.cloud import firestore


def test_firestore_write_fires_python_function(firestore_client: firestore.Client) -> None:
    firestore_client.collection("posts").document("p1").set({"a": 1})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if list(firestore_client.collection("spike").stream()):
            return
        time.sleep(0.2)
    raise AssertionError("no effect")
