"""The simulated Firestore database: documents, the database clock, preconditions, atomic
commits and transactions in both concurrency modes. It answers one RPC at a time, at the
virtual time the scheduler (`sim.world`) delivers it; it knows nothing of dedup.

Rules, each from Firestore's documentation:

* **Preconditions** (https://firebase.google.com/docs/firestore/manage-data/add-data and the
  `Precondition` message of the v1 API, https://cloud.google.com/firestore/docs/reference/rpc/
  google.firestore.v1#precondition): a create carries exists=false and fails with
  `ALREADY_EXISTS` on an existing document; an update carries exists=true (`NOT_FOUND` on a
  missing one) or an update time (`FAILED_PRECONDITION` when the document was written since,
  or is missing).
* **Updates by field path** (https://firebase.google.com/docs/firestore/manage-data/add-data,
  "Update fields in nested objects"): each key of an update is a field path, its names
  joined by "." (a name quoted in backticks may hold any character); `a.b` changes field `b`
  of map `a` and leaves `a`'s other fields as they were (the client's `parse_field_path`
  splits a path). A create's or a set's keys are field names.
* **Atomic commits** (https://firebase.google.com/docs/firestore/manage-data/transactions,
  "Batched writes"): every write of a commit applies, or none; at most 500 writes.
* **Server timestamps and read times** come from the database's clock: a commit's time is
  strictly after every earlier commit's, `SERVER_TIMESTAMP` becomes it, and a read carries
  the time it was served at.
* **Transactions** (https://firebase.google.com/docs/firestore/transaction-data-contention):
  - `pessimistic` (Standard edition's default): a read in a transaction takes a lock on the
    document; a write of that document by anyone else (a transaction's commit, a batch, a
    single write) waits until the lock is released (at commit, rollback or expiry); between
    two transactions the older one wins ("wound-wait"): it aborts the younger holder, whose
    next call fails with `ABORTED`.
  - `optimistic` (Enterprise edition's default): reads take no lock and never delay a
    writer; a commit fails with `ABORTED` if a document the transaction read has changed.
  - both: a transaction expires after 60 s without a read or write, and 270 s after it began
    (https://firebase.google.com/docs/firestore/quotas, "Time limit for a transaction");
    its locks are released then, and a later call with it fails with `INVALID_ARGUMENT`
    ("Transaction is invalid or expired", as the emulator and Firestore say).
* **Refusals** of values and sizes: `sim.values`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from google.api_core import exceptions as api
from google.cloud.firestore_v1.field_path import parse_field_path

from sim.values import (
    MAX_DOCUMENT_BYTES,
    SERVER_TIMESTAMP,
    document_size,
    refusal,
)

EPOCH = datetime(2030, 1, 1, tzinfo=UTC)
"""The database clock's time 0 (virtual time 0 of a run)."""
IDLE_SECONDS = 60.0
LIFETIME_SECONDS = 270.0
MAX_WRITES = 500
PESSIMISTIC, OPTIMISTIC = "pessimistic", "optimistic"
MODES = (PESSIMISTIC, OPTIMISTIC)


_MICRO = timedelta(microseconds=1)


def at(us: int) -> datetime:
    """The database time `us` microseconds after `EPOCH`."""
    return EPOCH + _MICRO * us


def us_of(moment: datetime) -> int:
    """Microseconds of a database time after `EPOCH`."""
    return (moment - EPOCH) // _MICRO


@dataclass
class Write:
    """One write of a commit: `create`, `set`, `update` (guarded by `guard`, an update time in
    microseconds, when given) or `delete`."""

    op: str
    path: str
    data: dict[str, Any] | None = None
    guard: int | None = None


def by_paths(fields: dict[str, Any]) -> dict[str, Any]:
    """An update's `fields` (keys: field paths) as the nested maps it writes: `{"a.b": 1}` is
    `{"a": {"b": 1}}`, marked as a partial map (`Partial`) for `merged`."""
    names = "".join(fields)  # field names, never a path: the map itself (the usual case)
    if "." not in names and "`" not in names:
        return fields
    nested: dict[str, Any] = {}
    for key, value in fields.items():
        *parents, last = parse_field_path(key)
        into = nested
        for name in parents:
            inner = into.get(name)
            if type(inner) is not Partial:
                inner = into[name] = Partial()
            into = inner
        into[last] = value
    return nested


class Partial(dict[str, Any]):
    """Part of a map an update writes by field path: merged into the stored map, not put in
    its place."""


def merged(current: dict[str, Any], written: dict[str, Any]) -> dict[str, Any]:
    """`current` with an update's `written` fields (from `by_paths`) put in."""
    result = dict(current)
    for key, value in written.items():
        if type(value) is Partial:
            inner = result.get(key)
            value = merged(inner if isinstance(inner, dict) else {}, value)
        result[key] = value
    return result


@dataclass
class Txn:
    """A transaction the server knows: its age, its last activity, what it read and locks."""

    id: int
    began: int
    active: int
    reads: dict[str, int | None] = field(default_factory=dict)
    state: str = "open"  # open, aborted (wounded), expired, done


class Waits(Exception):
    """The write must wait for locks held by `holders` (pessimistic mode)."""

    def __init__(self, holders: set[int], until: int) -> None:
        super().__init__("waits on a lock")
        self.holders = holders
        self.until = until  # when the first of those locks expires (microseconds)


class Server:
    """One database in one concurrency `mode`."""

    def __init__(self, mode: str) -> None:
        assert mode in MODES
        self.mode = mode
        self.docs: dict[str, tuple[dict[str, Any], int]] = {}
        self.last_commit = 0
        self.txns: dict[int, Txn] = {}
        self.locks: dict[str, set[int]] = {}
        self.next_txn = 1
        self.open: dict[int, Txn] = {}
        self.soonest = 0  # no open transaction expires before this (microseconds)
        self.waiting: dict[int, set[str]] = {}  # transactions whose commit waits on a lock
        self.refusals: list[tuple[str, str]] = []
        """(path, reason) of every write refused as INVALID_ARGUMENT for its value."""

    # --- transactions ------------------------------------------------------------------

    def begin(self, now: int) -> int:
        self.expire(now)
        txn = Txn(self.next_txn, now, now)
        self.soonest = min(self.soonest, self.expiry(txn)) if self.open else self.expiry(txn)
        self.txns[txn.id] = txn
        self.open[txn.id] = txn
        self.next_txn += 1
        return txn.id

    def rollback(self, txn_id: int, now: int) -> None:
        self.expire(now)
        txn = self.txns.get(txn_id)
        if txn is not None and txn.state == "open":
            self._end(txn, "done")

    def _live(self, txn_id: int, now: int) -> Txn:
        txn = self.txns.get(txn_id)
        if txn is None or txn.state in ("expired", "done"):
            raise api.InvalidArgument("Transaction is invalid or expired.")
        if txn.state == "aborted":
            raise api.Aborted("Transaction was aborted by an older one (lock contention).")
        txn.active = now
        return txn

    def _end(self, txn: Txn, state: str) -> None:
        txn.state = state
        self.waiting.pop(txn.id, None)
        if state != "aborted":
            self.open.pop(txn.id, None)
        for path in list(txn.reads):
            holders = self.locks.get(path)
            if holders is not None:
                holders.discard(txn.id)
                if not holders:
                    del self.locks[path]

    def expire(self, now: int) -> None:
        """End the transactions idle for 60 s or open for 270 s (their locks released)."""
        if not self.open or now < self.soonest:
            return
        for txn in list(self.open.values()):
            if self.expiry(txn) <= now:
                self._end(txn, "expired")
        self.soonest = min((self.expiry(t) for t in self.open.values()), default=0)

    @staticmethod
    def expiry(txn: Txn) -> int:
        return min(txn.active + int(IDLE_SECONDS * 1e6), txn.began + int(LIFETIME_SECONDS * 1e6))

    # --- reads -------------------------------------------------------------------------

    def get(self, path: str, now: int, txn_id: int | None = None) -> tuple[Any, int, int | None]:
        """(a copy of the data or None, the read time, the update time), locking the document
        for `txn_id` in pessimistic mode."""
        self.expire(now)
        found = self.docs.get(path)
        if txn_id is not None:
            txn = self._live(txn_id, now)
            txn.reads.setdefault(path, found[1] if found else None)
            if self.mode == PESSIMISTIC:
                self.locks.setdefault(path, set()).add(txn_id)
        if found is None:
            return None, now, None
        return found[0], now, found[1]  # never changed in place: commits build new maps

    # --- commits -----------------------------------------------------------------------

    def commit(self, writes: list[Write], now: int, txn_id: int | None = None) -> int:
        """Apply `writes` atomically: their commit time. Raises the error Firestore answers
        with, or `Waits` while a lock of another transaction holds a written document."""
        self.expire(now)
        txn = self._live(txn_id, now) if txn_id is not None else None
        if len(writes) > MAX_WRITES:
            raise api.InvalidArgument(f"A commit may hold at most {MAX_WRITES} writes.")
        if txn is not None and self.mode == OPTIMISTIC:
            for path, seen in txn.reads.items():
                found = self.docs.get(path)
                if (found[1] if found else None) != seen:
                    self._end(txn, "aborted")
                    raise api.Aborted(f"{path} changed since the transaction read it.")
        if self.mode == PESSIMISTIC:
            self._wait_for_locks(writes, txn, now)
        fields = [
            by_paths(w.data) if w.op == "update" and w.data is not None else w.data for w in writes
        ]
        for write, data in zip(writes, fields, strict=True):
            reason = refusal(data) if data is not None else None
            if reason is not None:
                self.refusals.append((write.path, reason))
                raise api.InvalidArgument(reason)
        staged: dict[str, tuple[dict[str, Any], int] | None] = {}
        for write, data in zip(writes, fields, strict=True):
            current = staged[write.path] if write.path in staged else self.docs.get(write.path)
            staged[write.path] = self._staged(write, data, current)
        stamp = max(now, self.last_commit + 1)
        result: dict[str, dict[str, Any] | None] = {}
        for path, staged_doc in staged.items():
            if staged_doc is None:
                result[path] = None
                continue
            data = {k: at(stamp) if v is SERVER_TIMESTAMP else v for k, v in staged_doc[0].items()}
            size = document_size(path, data)
            if size > MAX_DOCUMENT_BYTES:
                reason = f"Document {path} is {size} bytes: maximum entity size is 1 MiB"
                self.refusals.append((path, reason))
                raise api.InvalidArgument(reason)
            result[path] = data
        self.last_commit = stamp
        for path, written in result.items():
            if written is None:
                self.docs.pop(path, None)
            else:
                self.docs[path] = (written, stamp)
        if txn is not None:
            self._end(txn, "done")
        return stamp

    def _staged(
        self, write: Write, written: dict[str, Any] | None, current: Any
    ) -> tuple[dict[str, Any], int] | None:
        if write.op == "create" and current is not None:
            raise api.AlreadyExists(f"Document already exists: {write.path}")
        if write.op == "update":
            if write.guard is not None and (current is None or current[1] != write.guard):
                raise api.FailedPrecondition(f"{write.path}: the stored version does not match")
            if current is None:
                raise api.NotFound(f"No document to update: {write.path}")
        if write.op == "delete":
            return None
        data = dict(written or {})
        if write.op == "update":
            data = merged(current[0], data)
        return data, 0

    def _wait_for_locks(self, writes: list[Write], txn: Txn | None, now: int) -> None:
        holders: set[int] = set()
        for write in writes:
            holders |= self.locks.get(write.path, set())
        if txn is not None:
            holders.discard(txn.id)
        if not holders:
            return
        if txn is not None:
            waits_on_us = {h for h in holders if self.waiting.get(h, set()) & set(txn.reads)}
            if waits_on_us:  # a deadlock: the commit that closes the cycle is aborted
                self._end(txn, "aborted")
                raise api.Aborted("Transaction lock timeout: a deadlock on a document's lock.")
            self.waiting[txn.id] = {w.path for w in writes}
        raise Waits(holders, min(self.expiry(self.txns[h]) for h in holders))
