"""A record within every documented size limit stays far under Firestore's 40,000 index entries
per document once `dedup setup` (and the template's `firestore.indexes.json`) exempt the fields
no query reads: `result`, `notes` and `steps` are maps of the handler's own values, whose every
leaf a Standard database would index twice (ascending and descending).

The emulator does not enforce the 40,000 entries, so the test writes a real record on it through
the library and counts the entries its indexed fields would make, by Firestore's rules for
automatic single-field indexes ("Index entry count", firebase.google.com/docs/firestore/
query-data/index-overview#index_entries): a map contributes its subfields, each scalar one
ascending and one descending entry, an array one array-contains entry per value.
"""

from __future__ import annotations

import uuid
from typing import Any

from google.cloud import firestore

from dedup import DedupConfig, Deduplicator, Delivery
from dedup.cli.setup import UNINDEXED_FIELDS, setup_commands
from dedup.kernel.record import Field

MAX_INDEX_ENTRIES = 40_000
"""Firestore's limit of index entries per document (its "Quotas and limits" page)."""
RESULT_LEAVES = 20_001
"""Small ints under 6-character keys: about 300 KB as Firestore counts, under the result's
512 KiB, yet 40,002 index entries if `result` were indexed."""


def index_entries(value: Any) -> int:
    """The automatic single-field index entries Firestore makes for one field's value."""
    if isinstance(value, dict):
        return sum(index_entries(v) for v in value.values())
    if isinstance(value, list):
        return len(value)
    return 2


def test_a_record_at_the_size_limits_stays_under_the_index_entry_limit(
    firestore_client: firestore.Client,
) -> None:
    """On the Firestore emulator: a lease-mode record with a 20,001-entry result, 3,000 notes
    and a 3,000-entry step, every one within its documented limit, is written; the fields a
    Standard database would still index after `dedup setup` make fewer than 100 entries, where
    `result` alone would make 40,002."""
    dedup = Deduplicator(DedupConfig(cache_size=0), client=firestore_client)

    def handler(delivery: Delivery) -> dict[str, int]:
        delivery.note(**{f"n{i}": i for i in range(3_000)})
        delivery.step("many", lambda: {f"s{i}": i for i in range(3_000)})
        return {f"r{i:05}": i for i in range(RESULT_LEAVES)}

    event_id = uuid.uuid4().hex
    outcome = dedup.run(event_id, "tIndexEntries", handler)
    assert outcome.result is not None
    record = firestore_client.document(f"triggerEvents/{event_id}-tIndexEntries").get().to_dict()
    assert record is not None
    assert len(record[Field.RESULT]) == RESULT_LEAVES
    assert record[Field.NOTES]
    assert record[Field.STEPS]

    indexed = sum(index_entries(v) for k, v in record.items() if k not in UNINDEXED_FIELDS)
    assert indexed < 100, sorted(k for k in record if k not in UNINDEXED_FIELDS)
    assert index_entries(record[Field.RESULT]) > MAX_INDEX_ENTRIES


def test_setup_exempts_the_handlers_maps_under_the_configured_collection() -> None:
    """`dedup setup` on Standard exempts `result`, `notes` and `steps` from single-field indexes
    in the collection group of the collection it is given (`DEDUP_COLLECTION`'s, e.g. a
    subcollection); on Enterprise it exempts nothing (no automatic index to exempt from)."""
    commands = setup_commands("p1", "db1", "tenants/acme/dedupRecords", steps=["indexes"])
    exempted = {
        command[5]: command
        for command in commands
        if command[2:5] == ["indexes", "fields", "update"] and "--disable-indexes" in command
    }
    for name in (Field.RESULT, Field.NOTES, Field.STEPS):
        assert "--collection-group=dedupRecords" in exempted[name]
    enterprise = setup_commands(
        "p1", "db1", "triggerEvents", steps=["indexes"], edition="enterprise"
    )
    assert not [c for c in enterprise if "--disable-indexes" in c]
