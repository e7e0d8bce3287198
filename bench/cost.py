"""Dollars per million events: the counted document reads and writes priced at Firestore's list
prices, plus the TTL delete and the storage of each record for the retention period, and the
instance CPU the dedup adds (`bench.cpu`) priced at Cloud Run's.

Sources (Firestore Standard edition, checked 2026-11):

* prices: https://cloud.google.com/firestore/pricing (location nam5, multi-region US; other
  locations differ, every figure below scales with them);
* TTL deletes are billed as document deletes: https://cloud.google.com/firestore/docs/ttl;
* instance CPU: https://cloud.google.com/run/pricing (checked 2026-12; Cloud Functions 2nd gen
  is billed as Cloud Run), Tier 1 regions, CPU allocated only during request processing:
  $0.000024 per vCPU-second beyond the free tier. The figure is the client CPU the dedup adds
  to a delivery (its mode's CPU minus the baseline's), a floor: an instance is billed for its
  allocated vCPU while it serves requests, waiting on Firestore included, shared by the
  requests it serves at once;
* storage sizes: https://firebase.google.com/docs/firestore/storage-size (a string is its
  UTF-8 bytes + 1; a document is its name + its fields + 32 bytes; an index entry is the
  document's name, its parent's name, the indexed values and 32 bytes).

What is billed is documents, not RPCs: `BeginTransaction`, `Rollback` and a transaction's
`Commit` cost nothing by themselves; each document asked for by `BatchGetDocuments` is a read
(a missing one too) and each write in a `Commit` is a write, precondition failures included
(counted as billed: the conservative reading). The dedup's share of a fresh event is its
reads and writes minus the baseline's (the handler's own write), plus the record's TTL delete
and its storage for `retention_days` plus the day TTL may take to delete it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from google.cloud import firestore

from dedup.config import DEFAULT_RETENTION_DAYS
from dedup.platform.firestore_values import document_name_size, string_size, value_size

LOCATION = "nam5"
PRICE_PER_100K = {"read": 0.06, "write": 0.18, "delete": 0.02}
"""US dollars per 100,000 documents read, written, deleted (nam5)."""
STORAGE_PER_GIB_MONTH = 0.18
"""US dollars per GiB stored for a month (nam5)."""
VCPU_SECOND_USD = 0.000024
"""US dollars per vCPU-second of an instance (Cloud Run Tier 1, request-based billing)."""
DAYS_PER_MONTH = 30.44
TTL_LAG_DAYS = 1
"""TTL deletes expired documents "typically within 24 hours": they are stored that long too."""

ENTERPRISE_PER_MILLION_UNITS = {"read": 0.05, "write": 0.26}
"""Firestore Enterprise edition, us-central1: US dollars per million read units (4 KiB) and
write units (1 KiB; a delete, a TTL delete included, is billed in write units too)
(https://cloud.google.com/firestore/enterprise/pricing, checked 2026-12)."""

INDEXES_FILE = Path(__file__).resolve().parent.parent / "firestore.indexes.json"


def _index_config(collection: str) -> tuple[set[str], list[list[str]]]:
    """(fields exempt from single-field indexes, composite indexes' fields) of `collection`."""
    config = json.loads(INDEXES_FILE.read_text())
    exempt = {
        o["fieldPath"]
        for o in config.get("fieldOverrides", [])
        if o["collectionGroup"] == collection and o.get("indexes") == []
    }
    composites = [
        [f["fieldPath"] for f in index["fields"]]
        for index in config.get("indexes", [])
        if index["collectionGroup"] == collection
    ]
    return exempt, composites


def stored_bytes(path: str, fields: dict[str, Any], *, indexed: bool = True) -> dict[str, int]:
    """Storage of one document at `path` with `fields`: the document and its index entries
    (single-field ascending and descending for every field not exempt in
    firestore.indexes.json, and the composite indexes), in bytes."""
    name = document_name_size(path)
    document = name + sum(string_size(k) + value_size(v) for k, v in fields.items()) + 32
    if not indexed:
        return {"document": document, "indexes": 0}
    collection = path.split("/")[-2]
    exempt, composites = _index_config(collection)
    parent = 16  # a root collection's parent is the database
    entries = 0
    for key, value in fields.items():
        if key not in exempt:
            entries += 2 * (name + parent + string_size(key) + value_size(value) + 32)
    for index in composites:
        if all(f in fields for f in index):
            entries += name + parent + sum(value_size(fields[f]) for f in index) + 32
    return {"document": document, "indexes": entries}


def record_sizes(client: firestore.Client, paths: dict[str, list[str]]) -> dict[str, int]:
    """Bytes stored per event for each implementation: the sum over the documents it keeps
    (`paths`: implementation -> document paths of one event)."""
    sizes = {}
    for impl, documents in paths.items():
        total = 0
        for path in documents:
            snapshot = client.document(path).get()
            if not snapshot.exists:
                raise RuntimeError(f"{impl}: no document {path} to size")
            parts = stored_bytes(path, snapshot.to_dict() or {})
            total += parts["document"] + parts["indexes"]
        sizes[impl] = total
    return sizes


def _dollars(reads: float, writes: float, deletes: float) -> float:
    return (
        reads * PRICE_PER_100K["read"]
        + writes * PRICE_PER_100K["write"]
        + deletes * PRICE_PER_100K["delete"]
    ) / 100_000


def cpu_usd(cpu_us_per_event: float) -> float:
    """Dollars per million events of `cpu_us_per_event` microseconds of instance CPU."""
    return cpu_us_per_event / 1e6 * VCPU_SECOND_USD * 1e6


def per_million(
    latency: list[dict[str, Any]],
    sizes: dict[str, int],
    retention_days: int = DEFAULT_RETENTION_DAYS,
    cpu_us: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Dollars per million events for each implementation: the dedup's share of a fresh event
    (Firestore operations and storage, and with `cpu_us`, the mean client CPU per fresh
    delivery by mode, the instance CPU it adds to the baseline's), and a duplicate (cold cache;
    a cached one costs nothing)."""
    series = {(s["impl"], s["kind"]): s for s in latency}
    base = series[("baseline", "fresh")]
    rows = []
    for impl in ("naive", "lease", "transaction", "write_only"):
        fresh, duplicate = series[(impl, "fresh")], series[(impl, "duplicate")]
        reads = fresh["doc_reads"] - base["doc_reads"]
        writes = fresh["doc_writes"] - base["doc_writes"]
        kept_forever = impl == "naive"  # no expireAt: its documents are never deleted
        deletes = 0 if kept_forever else 1
        days = retention_days + TTL_LAG_DAYS
        storage = sizes[impl] * 1e6 / 2**30 * STORAGE_PER_GIB_MONTH * days / DAYS_PER_MONTH
        operations = _dollars(reads, writes, deletes) * 1e6
        instance_cpu = None
        if cpu_us is not None and impl in cpu_us:
            instance_cpu = round(cpu_usd(cpu_us[impl] - cpu_us["baseline"]), 4)
        rows.append(
            {
                "impl": impl,
                "reads": round(reads, 3),
                "writes": round(writes, 3),
                "deletes": deletes,
                "bytes_per_event": sizes[impl],
                "operations_usd": round(operations, 3),
                "storage_usd": round(storage, 3),
                "fresh_usd": round(operations + storage, 3),
                "instance_cpu_usd": instance_cpu,
                "duplicate_reads": duplicate["doc_reads"],
                "duplicate_writes": duplicate["doc_writes"],
                "duplicate_usd": round(
                    _dollars(duplicate["doc_reads"], duplicate["doc_writes"], 0) * 1e6, 3
                ),
                "kept_forever": kept_forever,
            }
        )
    return rows


def enterprise_lease(record_bytes: dict[str, Any]) -> dict[str, Any]:
    """Dollars per million fresh lease-mode events on Firestore Enterprise edition: the claim's
    and the outcome's write units (`bench.record_size`) and the TTL delete's (one unit per KiB
    of the record deleted), no read; the records' collection has no index entries there
    unless created (Enterprise creates no single-field index by itself)."""
    units = record_bytes["write_units"]
    delete_units = units["outcome"]
    writes = units["claim"] + units["outcome"] + delete_units
    return {
        "write_units": writes,
        "usd": round(writes * ENTERPRISE_PER_MILLION_UNITS["write"], 3),
        "prices_per_million_units": ENTERPRISE_PER_MILLION_UNITS,
    }


def prices() -> dict[str, Any]:
    """The prices used, for results.json."""
    return {
        "location": LOCATION,
        "per_100k": PRICE_PER_100K,
        "storage_per_gib_month": STORAGE_PER_GIB_MONTH,
        "vcpu_second": VCPU_SECOND_USD,
        "retention_days": DEFAULT_RETENTION_DAYS,
        "ttl_lag_days": TTL_LAG_DAYS,
    }
