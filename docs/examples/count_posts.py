"""A post counter moved once per created post: transaction mode."""

from firebase_functions import firestore_fn

from dedup import Delivery, Mode, trigger_once


@firestore_fn.on_document_created(document="posts/{postId}")
@trigger_once("count_posts", mode=Mode.TRANSACTION)
def count_posts(
    event: firestore_fn.Event[firestore_fn.DocumentSnapshot | None], delivery: Delivery
) -> None:
    # Reads first, then writes, all through the transaction the dedup marker commits in.
    transaction = delivery.transaction
    assert transaction is not None  # always set in Mode.TRANSACTION
    stats = delivery.client.document("stats/posts")
    snapshot = stats.get(transaction=transaction)
    total = (snapshot.to_dict() or {}).get("total", 0)  # absent document or field: 0
    transaction.set(stats, {"total": total + 1}, merge=True)
