"""Record helpers: lease arithmetic on the database clock and scrubbed, bounded errors."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from dedup.kernel.record import MAX_ERROR_CHARS, Mode, Record, State, error_text, scrub_urls

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def _record(**changes: object) -> Record:
    base: dict[str, object] = {
        "key": "e-s",
        "event_id": "e",
        "suffix": "s",
        "state": State.IN_PROGRESS,
        "sent": False,
        "owner": "o",
        "lease_started_at": T0,
        "lease_seconds": 60,
        "attempts": 1,
        "first_attempt_at": T0,
        "last_attempt_at": T0,
        "sent_at": None,
        "expire_at": None,
        "last_error": None,
        "payload_hash": None,
        "mode": Mode.LEASE,
    }
    base.update(changes)
    return Record(**base)  # type: ignore[arg-type]


def test_lease_expiry_is_start_plus_seconds() -> None:
    """A lease is live strictly before leaseStartedAt + leaseSeconds, expired from then on."""
    record = _record()
    assert record.lease_expires_at == T0 + timedelta(seconds=60)
    assert record.lease_live(T0 + timedelta(seconds=59))
    assert not record.lease_live(T0 + timedelta(seconds=60))


def test_released_record_has_no_lease() -> None:
    """owner None means released: no expiry, never live."""
    record = _record(owner=None, lease_started_at=None)
    assert record.lease_expires_at is None
    assert not record.lease_live(T0)


def test_error_text_scrubs_url_secrets() -> None:
    """Credentials and query strings of URLs never reach lastError."""
    text = error_text(RuntimeError("POST https://user:pw@h/p?q=1 failed; see http://x/y#frag"))
    assert text == "RuntimeError: POST https://h/p failed; see http://x/y"


_SCRUB_ONE_MATCH_PER_POSITION = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?:[^/\s@]*@)?(?P<rest>[^\s?#]*)(?:[?#]\S*)?"
)
"""The scrub as it first was: the same URLs, but a match tried from every letter of a long
word, so a 100,000-letter message without a space took seconds (quadratic)."""


@given(st.text(alphabet="aZ9+.-:/@?# \n\u00e9", max_size=60))
def test_scrub_urls_removes_what_the_first_scrub_removed(text: str) -> None:
    """The linear scrub gives exactly the first one's text, for any text made of the characters
    a URL's parts are told apart by (a scheme's, "://", "@", "?", "#", spaces)."""
    first = _SCRUB_ONE_MATCH_PER_POSITION.sub(lambda m: m["scheme"] + m["rest"], text)
    assert scrub_urls(text) == first


def test_error_text_is_truncated() -> None:
    """lastError is at most 1000 characters."""
    assert len(error_text(ValueError("x" * 5000))) == MAX_ERROR_CHARS
