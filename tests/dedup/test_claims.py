"""`decide()`, the one claim decision of every mode, as a table: no emulator needed."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from dedup.claims import Claim, decide
from dedup.record import Mode, Record, State

T0 = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = 60
MAX_ATTEMPTS = 5

IN_PROGRESS = Record(
    key="e-s",
    event_id="e",
    suffix="s",
    state=State.IN_PROGRESS,
    sent=False,
    owner="owner-1",
    lease_started_at=T0,
    lease_seconds=LEASE,
    attempts=1,
    first_attempt_at=T0,
    last_attempt_at=T0,
    sent_at=None,
    expire_at=None,
    last_error=None,
    payload_hash=None,
    mode=Mode.LEASE,
)
RELEASED = replace(IN_PROGRESS, owner=None, lease_started_at=None, last_error="boom")
LIVE = T0 + timedelta(seconds=LEASE - 1)
EXPIRED = T0 + timedelta(seconds=LEASE)  # the lease ends at leaseStartedAt + leaseSeconds

TABLE: dict[str, tuple[Record | None, datetime, Claim]] = {
    "absent": (None, T0, Claim.CREATE),
    "sent": (replace(IN_PROGRESS, state=State.SENT, sent=True, owner=None), LIVE, Claim.SKIP),
    "failed": (replace(RELEASED, state=State.FAILED), EXPIRED, Claim.SKIP),
    "dead": (replace(RELEASED, state=State.DEAD, attempts=MAX_ATTEMPTS), EXPIRED, Claim.SKIP),
    "sent with a stale lease still set": (replace(IN_PROGRESS, state=State.SENT), LIVE, Claim.SKIP),
    "lease live": (IN_PROGRESS, LIVE, Claim.WAIT),
    "lease live, attempts used up": (replace(IN_PROGRESS, attempts=MAX_ATTEMPTS), LIVE, Claim.WAIT),
    "lease expired at its last instant": (IN_PROGRESS, EXPIRED, Claim.TAKE_OVER),
    "lease expired, attempts left": (
        replace(IN_PROGRESS, attempts=MAX_ATTEMPTS - 1),
        EXPIRED,
        Claim.TAKE_OVER,
    ),
    "lease expired, attempts used up": (
        replace(IN_PROGRESS, attempts=MAX_ATTEMPTS),
        EXPIRED,
        Claim.BURY,
    ),
    "lease expired, attempts above the bound": (
        replace(IN_PROGRESS, attempts=MAX_ATTEMPTS + 3),
        EXPIRED,
        Claim.BURY,
    ),
    "released": (RELEASED, T0, Claim.TAKE_OVER),
    "released with attempts used up (an operator's release)": (
        replace(RELEASED, attempts=MAX_ATTEMPTS),
        T0,
        Claim.TAKE_OVER,
    ),
    "owner without a lease start (released by hand)": (
        replace(IN_PROGRESS, lease_started_at=None),
        LIVE,
        Claim.TAKE_OVER,
    ),
    "lease started in the future (read on a lagging replica)": (
        replace(IN_PROGRESS, lease_started_at=T0 + timedelta(seconds=5)),
        T0,
        Claim.WAIT,
    ),
}


@pytest.mark.parametrize("case", list(TABLE))
@pytest.mark.parametrize("mode", list(Mode))
def test_decide(case: str, mode: Mode) -> None:
    """Each record state maps to one claim, the same in every mode, judged on the read time."""
    record, read_time, expected = TABLE[case]
    if record is not None:
        record = replace(record, mode=mode)
    assert decide(record, read_time, MAX_ATTEMPTS) is expected
