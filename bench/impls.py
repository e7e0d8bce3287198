"""The implementations under comparison, each delivering one event with the same effect.

The effect is one write to `benchEffects/<event id>` that increments `n`, done the idiomatic
way for each implementation: a plain write after the claim (baseline, naive, lease), inside
the transaction (transaction mode) or in the marker's batch (write-only mode). Reading `n`
back counts effects that really committed, whatever the implementation.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from google.cloud import firestore

from bench.naive import NaiveTriggerOnce
from dedup import DedupConfig, Deduplicator, Delivery, Mode
from dedup.kernel.record import State
from dedup.kernel.transitions import finished, new_record

EFFECTS = "benchEffects"
"""Collection of the effect documents."""

SUFFIX = "benchEffect"
"""The function suffix used by every deduplicating implementation."""

Hook = Callable[[], None]
"""Called inside the handler just before its effect (used to hold a lease open)."""


def _noop() -> None:
    return None


def effect_fields(event_id: str) -> dict[str, Any]:
    """The effect: count one more application for this event."""
    return {"eventId": event_id, "n": firestore.Increment(1)}


class Implementation(Protocol):
    """Delivers one event; returns the outcome's name, raises what the implementation raises."""

    name: str
    has_cache: bool
    """True when a duplicate can be answered from per-instance memory."""
    has_lease: bool
    """True when a delivery holds a lease another delivery can run into."""

    def deliver(self, event_id: str, hook: Hook = _noop) -> str:
        """Deliver `event_id` once."""
        ...


@dataclass
class Baseline:
    """No dedup: the handler's own single-document write."""

    client: firestore.Client
    name: str = "baseline"
    has_cache: bool = False
    has_lease: bool = False

    def deliver(self, event_id: str, hook: Hook = _noop) -> str:
        """One write; a duplicate applies the effect again."""
        hook()
        self.client.collection(EFFECTS).document(event_id).set(effect_fields(event_id), merge=True)
        return "ran"


@dataclass
class Naive:
    """`bench.naive`: triggerOnce transaction + Google's lease sample."""

    client: firestore.Client
    effect: bool = True
    name: str = "naive"
    has_cache: bool = False
    has_lease: bool = True

    def __post_init__(self) -> None:
        """One naive wrapper per instance."""
        self.naive = NaiveTriggerOnce(self.client)

    def deliver(self, event_id: str, hook: Hook = _noop) -> str:
        """Run through `NaiveTriggerOnce.run`."""

        def handler() -> None:
            hook()
            if self.effect:
                ref = self.client.collection(EFFECTS).document(event_id)
                ref.set(effect_fields(event_id), merge=True)

        return "ran" if self.naive.run(event_id, SUFFIX, handler) else "duplicate"


@dataclass
class Project:
    """This project's `Deduplicator` in one mode; `effect=False` runs a no-op handler;
    `settings` go to its `DedupConfig` (`cache_size=0`, `key_layout="spread"`...)."""

    client: firestore.Client
    mode: Mode
    effect: bool = True
    name: str = ""
    has_cache: bool = True
    has_lease: bool = False
    settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """One Deduplicator (one LRU) per instance, default settings unless overridden."""
        self.name = self.name or self.mode.value
        self.has_lease = self.mode is Mode.LEASE
        self.has_cache = self.settings.get("cache_size", 1) != 0
        config = DedupConfig(project=self.client.project, **self.settings)
        self.dedup = Deduplicator(config, client=self.client)

    def deliver(self, event_id: str, hook: Hook = _noop) -> str:
        """Run through `Deduplicator.run` in this mode (a no-op handler builds nothing)."""

        def handler(delivery: Delivery) -> None:
            hook()
            if not self.effect:
                return
            ref = self.client.collection(EFFECTS).document(event_id)
            fields = effect_fields(event_id)
            if delivery.transaction is not None:
                delivery.transaction.set(ref, fields, merge=True)
            elif delivery.batch is not None:
                delivery.batch.set(ref, fields, merge=True)
            else:
                ref.set(fields, merge=True)

        return self.dedup.run(event_id, SUFFIX, handler, mode=self.mode).kind.value


@dataclass
class RecordWrites:
    """Lease mode's two record writes, through google-cloud-firestore alone: the claim's
    `create` and the fenced "sent" `update`, with the fields dedup writes
    (`dedup.kernel.transitions`), and nothing of dedup's flow around them. What the library
    costs the client for the record, the floor of `lease_noop` on the public API."""

    client: firestore.Client
    name: str = "record_writes"
    has_cache: bool = False
    has_lease: bool = True

    def __post_init__(self) -> None:
        """The records' collection and lease length of the default settings, read once."""
        config = DedupConfig()
        self.records = self.client.collection(config.collection)
        self.lease_seconds = config.lease_seconds

    def deliver(self, event_id: str, hook: Hook = _noop) -> str:
        """Create the record as a fresh claim does, then mark it sent, fenced."""
        hook()
        expire_at = datetime.now(UTC) + timedelta(days=7)
        owner = uuid.uuid4().hex
        claim = new_record(
            event_id=event_id,
            suffix=SUFFIX,
            mode=Mode.LEASE,
            state=State.IN_PROGRESS,
            owner=owner,
            leased=True,
            lease_seconds=self.lease_seconds,
            payload_hash=None,
            expire_at=expire_at,
        )
        ref = self.records.document(f"{event_id}-{SUFFIX}")
        written = ref.create(claim, retry=None, timeout=10)
        option = self.client.write_option(last_update_time=written.update_time)
        sent = finished(State.SENT, owner=owner, expire_at=expire_at)
        ref.update(sent, option=option, retry=None, timeout=10)
        return "ran"


Factory = Callable[[firestore.Client], Implementation]
"""Builds a fresh instance (own caches) of one implementation on a client."""

FACTORIES: dict[str, Factory] = {
    "baseline": lambda c: Baseline(c),
    "naive": lambda c: Naive(c),
    "lease": lambda c: Project(c, Mode.LEASE),
    "transaction": lambda c: Project(c, Mode.TRANSACTION),
    "write_only": lambda c: Project(c, Mode.WRITE_ONLY),
    "naive_noop": lambda c: Naive(c, effect=False, name="naive_noop"),
    "lease_noop": lambda c: Project(c, Mode.LEASE, effect=False, name="lease_noop"),
    "record_writes": lambda c: RecordWrites(c),
    "lease_spread": lambda c: Project(
        c, Mode.LEASE, name="lease_spread", settings={"key_layout": "spread"}
    ),
}
"""Every implementation; the `_noop` ones run a handler with no effect (dedup cost alone),
`lease_spread` uses the spread key layout (docs/capacity.md), `record_writes` is lease
mode's two record writes through the library alone (no dedup flow)."""

STORM_FACTORIES: dict[str, Factory] = {
    "naive": lambda c: Naive(c),
    **{
        mode.value: (lambda m: lambda c: Project(c, m, settings={"cache_size": 0}))(mode)
        for mode in Mode
    },
}
"""The storm's instances: this project's modes with the sent-keys cache off (every copy goes
to Firestore, as on instances that never saw the event), and naive (which has no cache)."""


def effects_applied(client: firestore.Client, event_ids: list[str]) -> dict[str, int]:
    """The committed `n` of each event's effect document (0 when absent)."""
    refs = [client.collection(EFFECTS).document(e) for e in event_ids]
    found = {s.id: int((s.to_dict() or {}).get("n", 0)) for s in client.get_all(refs) if s.exists}
    return {e: found.get(e, 0) for e in event_ids}
