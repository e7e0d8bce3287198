"""Every query the `dedup` commands send to the records has an index of `ENTERPRISE_INDEXES`.

On an Enterprise database a query with no index runs anyway, by scanning the whole collection,
so nothing would fail if a command's query lost its index: this test is what notices. It runs
each reading command against the Firestore emulator, keeps every query the client library
sends (the StructuredQuery, as it goes to the emulator, counts included), and checks that one
of the indexes `dedup setup --edition enterprise` creates has the query's fields as its leading
fields, in the query's order: its equality filters (ascending), then its order (each with its
direction; an inequality with no order may use either direction). The queries still reach the
emulator and answer; only their shape is noted on the way.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud import firestore
from google.cloud.firestore_v1 import base_query
from google.cloud.firestore_v1.types import StructuredQuery

from dedup.cli.setup import ENTERPRISE_INDEXES
from dedup.config import DEFAULT_COLLECTION
from dedup.kernel.record import State
from tests.cli import records
from tests.cli.conftest import Invoke
from tests.cli.records import record_fields

EQUAL = StructuredQuery.FieldFilter.Operator.EQUAL
DIRECTION = {
    StructuredQuery.Direction.ASCENDING: "ascending",
    StructuredQuery.Direction.DESCENDING: "descending",
}
COMMANDS = (
    ("list",),
    ("list", "--older-than", "1m"),
    ("list", "--state", "dead"),
    ("list", "--state", "dead", "--older-than", "1m"),
    ("list", "--suffix", "a"),
    ("list", "--state", "dead", "--suffix", "a"),
    ("list", "--subject", "users/alice"),
    ("stats",),
    ("revive", "--state", "dead", "--yes"),
    ("revive", "--state", "failed", "--suffix", "a", "--yes"),
    ("purge", "--older-than", "30d", "--dry-run"),
)
"""Each query shape of the reading commands (`dedup list`, `stats`, `revive --state`, `purge`)."""


@pytest.fixture
def sent_queries(monkeypatch: pytest.MonkeyPatch) -> list[StructuredQuery]:
    """The StructuredQuery of every query the client library sends from here on."""
    sent: list[StructuredQuery] = []
    original = base_query.BaseQuery._to_protobuf

    def noted(query: Any) -> StructuredQuery:
        built = original(query)
        sent.append(built)
        return built

    monkeypatch.setattr(base_query.BaseQuery, "_to_protobuf", noted)
    return sent


def shape(query: StructuredQuery) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """The query's equality fields, its order (field, direction; the document name left out:
    every index ends with it) and its inequality fields."""
    where = query.where
    filters = (
        [f.field_filter for f in where.composite_filter.filters]
        if "composite_filter" in where
        else [where.field_filter]
        if "field_filter" in where
        else []
    )
    equal = [f.field.field_path for f in filters if f.op == EQUAL]
    ranges = [f.field.field_path for f in filters if f.op != EQUAL]
    order = [
        (o.field.field_path, DIRECTION[o.direction])
        for o in query.order_by
        if o.field.field_path != "__name__"
    ]
    return equal, order, ranges


def served(equal: list[str], order: list[tuple[str, str]], ranges: list[str]) -> bool:
    """Whether an index of `ENTERPRISE_INDEXES` leads with the query's fields, in its order."""
    wanted = [(name, "ascending") for name in equal] + order
    for index in ENTERPRISE_INDEXES:
        lead = list(index.fields[: len(wanted)])
        if lead != wanted:
            continue
        rest = [name for name, _ in index.fields[len(wanted) :]]
        if all(name in (n for n, _ in order) or rest[:1] == [name] for name in ranges):
            return True
    return False


def test_every_query_of_the_commands_has_its_index(
    invoke: Invoke, firestore_client: firestore.Client, sent_queries: list[StructuredQuery]
) -> None:
    """Each query the reading commands send to the records (lists, counts, pages) is served by
    an index `dedup setup --edition enterprise` creates; each command still answers."""
    records.write(
        firestore_client,
        [
            record_fields("e1", "a", state=State.DEAD, subject="users/alice"),
            record_fields("e2", "b", state=State.FAILED),
            record_fields("e3", "a", state=State.IN_PROGRESS, lease="live"),
        ],
    )
    shapes = []
    for command in COMMANDS:
        sent_queries.clear()
        result = invoke(*command)
        assert result.exit_code == 0, (command, result.output)
        on_records = [q for q in sent_queries if q.from_[0].collection_id == DEFAULT_COLLECTION]
        assert on_records, f"{command} sent no query to the records"
        shapes += [(command, shape(q)) for q in on_records]
    missing = [(command, s) for command, s in shapes if not served(*s)]
    assert missing == [], missing
    seen = {(tuple(e), tuple(o), tuple(r)) for _, (e, o, r) in shapes}
    assert len(seen) >= len(ENTERPRISE_INDEXES), seen  # every index serves at least one shape
