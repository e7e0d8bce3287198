"""The naive pattern, as the articles publish it and people copy it, ported faithfully.

Two published snippets, stacked the way the articles recommend ("combine method 3 and 4"):

1. `triggerOnce` / `hasAlreadyTriggered` (TypeScript, firebase-admin)::

       const id = [eventID, suffix].join('-')
       return firestore().runTransaction(async t => {
         const ref = admin.firestore().collection('triggerEvents').doc(id)
         const doc = await t.get(ref)
         if (doc.exists) { return true }
         t.set(ref, { createTime: admin.firestore.FieldValue.serverTimestamp() })
         return false
       })

2. Google's lease sample (`shouldSendWithLease` / `markSent`, "Building idempotent functions"),
   whose lease is a local-clock `Date` 60 s ahead and whose `markSent` is a plain
   `emailRef.set({sent: true})` (not a transaction, as published)::

       if (emailDoc.exists && emailDoc.data().sent) return false;
       if (emailDoc.exists && new Date() < emailDoc.data().lease)
         return Promise.reject('Lease already taken, try later.');
       transaction.set(emailRef, {lease: new Date(new Date().getTime() + leaseTime)});
       return true;

Ported with google-cloud-firestore's transactional API (`@firestore.transactional`, default
5 attempts like `runTransaction`), keeping the published behaviour, flaws included: the
triggerOnce marker is written before the effect (a crash after it loses the event), the lease
is judged on the instance clock, and `markSent` overwrites the lease document. It is a peer for
measurement, not a recommendation.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from google.cloud import firestore

LEASE_TIME = timedelta(seconds=60)
"""`const leaseTime = 60 * 1000; // 60s` in the sample."""


class LeaseTaken(Exception):
    """`Promise.reject('Lease already taken, try later.')`: the platform should retry."""


class NaiveTriggerOnce:
    """`triggerOnce(suffix, handler)` wrapping Google's lease sample, on one Firestore client."""

    def __init__(
        self,
        client: firestore.Client,
        *,
        trigger_collection: str = "triggerEvents",
        lease_collection: str = "sentEmails",
        lease_time: timedelta = LEASE_TIME,
    ) -> None:
        """Markers in `trigger_collection`, leases and sent flags in `lease_collection`."""
        self.client = client
        self.trigger_collection = trigger_collection
        self.lease_collection = lease_collection
        self.lease_time = lease_time

    def has_already_triggered(self, event_id: str, suffix: str) -> bool:
        """The triggerOnce transaction: read the marker; write it if absent.

        Returns True when the marker existed (the delivery is skipped). Raises ValueError
        (wrapping Aborted) when 5 attempts lose to contention, as `runTransaction` rejects.
        """
        ref = self.client.collection(self.trigger_collection).document(f"{event_id}-{suffix}")

        @firestore.transactional
        def body(transaction: firestore.Transaction) -> bool:
            doc = ref.get(transaction=transaction)
            if doc.exists:
                return True  # "EventID: ... has already triggered."
            transaction.set(ref, {"createTime": firestore.SERVER_TIMESTAMP})
            return False

        result: bool = body(self.client.transaction())
        return result

    def should_send_with_lease(self, ref: firestore.DocumentReference) -> bool:
        """Google's `shouldSendWithLease`: False if sent, `LeaseTaken` if leased, else lease it.

        The lease is `datetime.now() + 60 s` on this instance's clock, compared with this
        instance's clock, like `new Date()` in the sample.
        """

        @firestore.transactional
        def body(transaction: firestore.Transaction) -> bool:
            doc = ref.get(transaction=transaction)
            data: dict[str, Any] = (doc.to_dict() or {}) if doc.exists else {}
            if doc.exists and data.get("sent"):
                return False
            lease = data.get("lease")
            if doc.exists and lease is not None and datetime.now(UTC) < lease:
                raise LeaseTaken("Lease already taken, try later.")
            transaction.set(ref, {"lease": datetime.now(UTC) + self.lease_time})
            return True

        result: bool = body(self.client.transaction())
        return result

    def mark_sent(self, ref: firestore.DocumentReference) -> None:
        """Google's `markSent`: `emailRef.set({sent: true})`, one plain write."""
        ref.set({"sent": True})

    def run(self, event_id: str, suffix: str, handler: Callable[[], None]) -> bool:
        """Deliver one event: triggerOnce around the lease sample. True if `handler` ran."""
        if self.has_already_triggered(event_id, suffix):
            return False
        ref = self.client.collection(self.lease_collection).document(f"{event_id}-{suffix}")
        if not self.should_send_with_lease(ref):
            return False
        handler()
        self.mark_sent(ref)
        return True
