"""The record writes built by `dedup.wire` are the messages the client library builds for the
same fields: same document, mask, precondition and transforms (transform order aside)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud import firestore
from google.cloud.firestore_v1 import _helpers

from dedup import wire
from dedup.record import Mode, State
from dedup.transitions import new_record

PATH = "projects/p/databases/(default)/documents/triggerEvents/e1-fn"
MOMENT = datetime(2026, 12, 1, 7, 30, 1, 123456, tzinfo=UTC)
NANOS = DatetimeWithNanoseconds(2026, 12, 1, 7, 30, 1, nanosecond=123456789, tzinfo=UTC)

FIELD_SETS: list[dict[str, Any]] = [
    {"eventId": "e1", "sent": False, "attempts": 1, "ratio": 0.5, "lastError": None},
    {"state": "sent", "sentAt": firestore.SERVER_TIMESTAMP, "leaseStartedAt": None},
    {"expireAt": MOMENT, "leaseStartedAt": NANOS, "owner": "f" * 32},
    {"a": firestore.SERVER_TIMESTAMP, "b": firestore.SERVER_TIMESTAMP},
    new_record(
        event_id="e1",
        suffix="fn",
        owner="0" * 32,
        state=State.IN_PROGRESS,
        mode=Mode.LEASE,
        leased=True,
        lease_seconds=60,
        payload_hash="abc",
        expire_at=MOMENT + timedelta(days=8),
    ),
    # Outside the flat shape: built by the library itself.
    {"result": {"orderId": "o-1", "items": [1, 2], "at": MOMENT}, "state": "sent"},
    {"notes": {}, "tags": ["x", "y"]},
    {"nested.path": 1, "state": "sent"},
    {"blob": b"\x00\x01", "state": "sent"},
]


def normalized(write: Any) -> Any:
    """`write` (a message or the library's wrapper) with its transforms sorted by path."""
    pb = type(getattr(write, "_pb", write))()
    pb.CopyFrom(getattr(write, "_pb", write))
    transforms = sorted(pb.update_transforms, key=lambda t: t.field_path)
    copies = [type(t)() for t in transforms]
    for copy, transform in zip(copies, transforms, strict=True):
        copy.CopyFrom(transform)
    del pb.update_transforms[:]
    pb.update_transforms.extend(copies)
    return pb


@pytest.mark.parametrize("fields", FIELD_SETS)
def test_a_create_is_the_librarys_create(fields: dict[str, Any]) -> None:
    library = _helpers.pbs_for_create(PATH, fields)
    assert len(library) == 1
    assert normalized(wire.create_write(PATH, fields)) == normalized(library[0])


@pytest.mark.parametrize("guard", [None, MOMENT, NANOS], ids=["exists", "micros", "nanos"])
@pytest.mark.parametrize("fields", FIELD_SETS)
def test_an_update_is_the_librarys_update(fields: dict[str, Any], guard: datetime | None) -> None:
    option = (
        _helpers.ExistsOption(exists=True) if guard is None else _helpers.LastUpdateOption(guard)
    )
    library = _helpers.pbs_for_update(PATH, fields, option)
    assert len(library) == 1
    expected = normalized(library[0])
    if guard is NANOS:  # the library's wrapper drops the nanoseconds of its guard; kept here
        expected.current_document.update_time.nanos = NANOS.nanosecond
    assert normalized(wire.update_write(PATH, fields, guard)) == expected


def test_a_nanosecond_guard_keeps_its_nanoseconds() -> None:
    write = wire.update_write(PATH, {"state": "sent"}, NANOS)
    assert write.current_document.update_time.nanos == 123456789


def test_flat_fields_are_built_without_the_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of the module: a flat record never goes through proto-plus."""

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("the library built a flat record's write")

    monkeypatch.setattr(_helpers, "pbs_for_create", refused)
    monkeypatch.setattr(_helpers, "pbs_for_update", refused)
    for fields in FIELD_SETS[:5]:
        assert wire.create_write(PATH, fields).current_document.exists is False
        assert wire.update_write(PATH, fields, MOMENT).HasField("update_mask")
