"""What a user hands the kernel, at every write that carries it, on the Firestore emulator, as
the red team ran it: short leases (3 s), RPC timeouts of 1 s, the platform delivering again
after every exception until a delivery returns.

Invariants checked here:

* **Text never blocks a write.** Every string the library writes from user data (an error's
  message and type name, an event's subject and source) goes through one function,
  `dedup.platform.firestore_values.storable_text`: lone surrogates escaped, cut by Firestore's
  UTF-8 bytes. So the release, `failed` and `dead` writes land whatever the handler raised: a
  `TerminalError` whose message holds `"\\ud800"` runs once and ends `failed` (sync, async,
  transaction mode); a plain exception with it leaves the event retryable, `in_progress` with
  no lease, never `unknown` with no effect under `on_ambiguous="skip"`. The release used to be
  refused, the lease kept until it expired, and the next delivery took it over as ambiguous.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from google.cloud import firestore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dedup import (
    AsyncDeduplicator,
    AsyncDelivery,
    Deduplicator,
    Delivery,
    Mode,
    OutcomeKind,
    Record,
    State,
    TerminalError,
)
from dedup.kernel.record import MAX_ERROR_CHARS, error_text, storable_text
from dedup.platform.firestore_values import refusal

MakeDedup = Callable[..., Deduplicator]
MakeAsyncDedup = Callable[..., AsyncDeduplicator]
ReadRecord = Callable[[str], Record | None]

SUFFIX = "s"
LEASE = 3
SHORT: dict[str, Any] = {
    "lease_seconds": LEASE,
    "rpc_timeout_seconds": 1,
    "min_retry_seconds": 0,
    "max_attempts": 3,
    "cache_size": 0,
}
"""The red team's settings: short leases, so that a scenario runs in seconds."""

LONE = "card \ud800 declined \udfff"
"""A message no UTF-8 field can carry as it is: two lone surrogates."""

ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=300)
"""Any text Python can hold, lone surrogates (category Cs) included."""
WITH_SURROGATE = st.tuples(ANY_TEXT, st.characters(categories=["Cs"]), ANY_TEXT).map("".join)
"""Any text holding at least one lone surrogate."""


def event() -> str:
    return f"inputs-{uuid.uuid4().hex[:10]}"


# --- 1. Text never blocks a write ----------------------------------------------------------------


@given(text=ANY_TEXT | st.text(max_size=3000))
def test_storable_text_is_taken_by_firestore_and_keeps_valid_text(text: str) -> None:
    stored = storable_text(text, max_bytes=2000, max_chars=1000)
    assert refusal(stored) is None
    assert type(stored) is str
    assert len(stored) <= 1000
    assert len(stored.encode("utf-8")) <= 2000
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return
    if len(text) <= 1000 and len(text.encode("utf-8")) <= 2000:
        assert stored == text  # valid text within the limits is kept as it is


class Odd(TerminalError):
    """An exception whose `str()` raises: its text cannot even be read."""

    def __str__(self) -> str:
        raise RuntimeError("no message")


ODD_ERRORS: list[tuple[str, Callable[[], Exception]]] = [
    ("surrogate-message", lambda: TerminalError(LONE)),
    ("long-type-name", lambda: type("Declined" * 500, (TerminalError,), {})("no")),
    ("str-raises", lambda: Odd()),
    ("huge-message", lambda: TerminalError("é" * 1_200_000)),
]


@pytest.mark.parametrize("make_error", [e[1] for e in ODD_ERRORS], ids=[e[0] for e in ODD_ERRORS])
def test_terminal_error_with_any_text_runs_once_and_ends_failed(
    make_dedup: MakeDedup, read_record: ReadRecord, make_error: Callable[[], Exception]
) -> None:
    dedup, event_id, calls = make_dedup(**SHORT), event(), [0]

    def handler(delivery: Delivery) -> None:
        calls[0] += 1
        raise make_error()

    outcome = dedup.run(event_id, SUFFIX, handler)
    assert outcome.kind is OutcomeKind.FAILED
    assert calls == [1]
    record = read_record(outcome.key)
    assert record is not None
    assert record.state is State.FAILED
    assert not record.has_lease
    assert record.last_error is not None
    assert len(record.last_error) <= MAX_ERROR_CHARS


def test_terminal_lone_surrogate_is_stored_escaped(
    make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    def handler(delivery: Delivery) -> None:
        raise TerminalError(LONE)

    outcome = make_dedup(**SHORT).run(event(), SUFFIX, handler)
    record = read_record(outcome.key)
    assert record is not None
    assert record.last_error == "TerminalError: card \\ud800 declined \\udfff"


@pytest.mark.parametrize("mode", [Mode.TRANSACTION, Mode.WRITE_ONLY])
def test_atomic_modes_store_any_error_text(
    make_dedup: MakeDedup, read_record: ReadRecord, mode: Mode
) -> None:
    dedup, event_id = make_dedup(**SHORT), event()

    def handler(delivery: Delivery) -> None:
        raise TerminalError(LONE)

    outcome = dedup.run(event_id, SUFFIX, handler, mode=mode)
    assert outcome.kind is OutcomeKind.FAILED
    record = read_record(outcome.key)
    assert record is not None
    assert record.state is State.FAILED
    assert record.last_error is not None
    assert "\\ud800" in record.last_error

    def failing(delivery: Delivery) -> None:
        raise RuntimeError(LONE)

    with pytest.raises(RuntimeError):
        dedup.run(event(), SUFFIX, failing, mode=mode)


def test_plain_error_with_lone_surrogate_releases_the_lease_under_skip(
    make_dedup: MakeDedup, read_record: ReadRecord
) -> None:
    """The release lands: the event stays retryable, and the next delivery (at once, no lease
    to wait for) runs the handler, never `unknown` with no effect."""
    dedup, event_id, calls = make_dedup(**SHORT), event(), [0]

    def handler(delivery: Delivery) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError(LONE)

    with pytest.raises(RuntimeError):
        dedup.run(event_id, SUFFIX, handler, on_ambiguous="skip")
    key = dedup.record_key(event_id, SUFFIX)
    record = read_record(key)
    assert record is not None
    assert record.state is State.IN_PROGRESS
    assert not record.has_lease
    assert not record.ambiguous
    outcome = dedup.run(event_id, SUFFIX, handler, on_ambiguous="skip")
    assert outcome.kind is OutcomeKind.RAN
    assert calls == [2]


def test_async_lease_mode_stores_any_error_text(
    make_async_dedup: MakeAsyncDedup, read_record: ReadRecord
) -> None:
    dedup, event_id, calls = make_async_dedup(**SHORT), event(), [0]

    async def terminal(delivery: AsyncDelivery) -> None:
        calls[0] += 1
        raise TerminalError(LONE)

    async def plain(delivery: AsyncDelivery) -> None:
        raise RuntimeError(LONE)

    async def deliver() -> tuple[Any, BaseException | None]:
        outcome = await dedup.run(event_id, SUFFIX, terminal)
        try:
            await dedup.run(event_id + "-plain", SUFFIX, plain, on_ambiguous="skip")
        except RuntimeError as exc:
            return outcome, exc
        return outcome, None

    outcome, raised = asyncio.run(deliver())
    assert outcome.kind is OutcomeKind.FAILED
    assert calls == [1]
    assert isinstance(raised, RuntimeError)
    record = read_record(dedup.record_key(event_id + "-plain", SUFFIX))
    assert record is not None
    assert record.state is State.IN_PROGRESS
    assert not record.has_lease


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(message=WITH_SURROGATE | ANY_TEXT)
def test_any_terminal_message_ends_failed_after_one_run(
    make_dedup: MakeDedup, read_record: ReadRecord, message: str
) -> None:
    dedup, calls = make_dedup(**SHORT), [0]

    def handler(delivery: Delivery) -> None:
        calls[0] += 1
        raise TerminalError(message)

    outcome = dedup.run(event(), SUFFIX, handler)
    assert outcome.kind is OutcomeKind.FAILED
    assert calls == [1]
    record = read_record(outcome.key)
    assert record is not None
    assert record.last_error == error_text(TerminalError(message))


def test_subject_and_source_with_any_text_are_stored(
    make_dedup: MakeDedup, firestore_client: firestore.Client
) -> None:
    dedup = make_dedup(**SHORT)
    outcome = dedup.run(
        event(), SUFFIX, lambda d: None, subject="posts/\ud800" + "x" * 10_000, source="//s\udfff"
    )
    assert outcome.kind is OutcomeKind.RAN
    data = firestore_client.collection("triggerEvents").document(outcome.key).get().to_dict()
    assert data is not None
    assert data["subject"].startswith("posts/\\ud800")
    assert data["source"] == "//s\\udfff"
    assert len(data["subject"].encode()) <= 6_144
