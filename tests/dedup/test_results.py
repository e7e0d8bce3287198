"""A handler's result is stored with "sent" and handed to every later duplicate."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dedup import Deduplicator, Delivery, Mode, OutcomeKind, Record
from dedup.kernel.transitions import MAX_RESULT_BYTES

MakeDedup = Callable[..., Deduplicator]
ReadRecord = Callable[[str], Record | None]


@pytest.mark.parametrize("mode", list(Mode))
def test_a_duplicate_gets_the_result_of_the_run_it_duplicates(
    mode: Mode, make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """What the handler returned when it ran is what every later duplicate is told, in every
    mode (the HTTP layer replays a stored response this way). Write-only mode builds its
    batch once more on a redelivery (blind, before it reads the record); nothing commits."""
    calls: list[int] = []

    def handler(delivery: Delivery) -> dict[str, object]:
        calls.append(delivery.attempt)
        return {"orderId": "o-1", "status": 201}

    first = make_dedup().run("e1", "s", handler, mode=mode)
    again = make_dedup(cache_size=0).run("e1", "s", handler, mode=mode)
    assert (first.kind, first.result) == (OutcomeKind.RAN, {"orderId": "o-1", "status": 201})
    assert (again.kind, again.result) == (OutcomeKind.DUPLICATE, first.result)
    assert len(calls) == (2 if mode is Mode.WRITE_ONLY else 1)
    assert read_record("e1-s").result == first.result  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", list(Mode))
def test_results_that_cannot_be_stored_never_fail_the_delivery(
    mode: Mode, make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """A return value that is not a mapping, or one over MAX_RESULT_BYTES, is not stored (the
    effect happened: "sent" must be recorded); the delivery still reports ran."""
    big = {"body": "x" * (MAX_RESULT_BYTES + 1)}
    assert make_dedup().run("big", "s", lambda d: big, mode=mode).kind is OutcomeKind.RAN
    assert make_dedup().run("obj", "s", lambda d: object(), mode=mode).kind is OutcomeKind.RAN  # type: ignore[arg-type,return-value]
    for key in ("big-s", "obj-s"):
        record = read_record(key)
        assert record is not None
        assert record.result is None
        assert record.is_sent
