"""`make demo` tells the truth: its story, played here, ends with every row matching."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo.emulator_triggers import ALERT_COPIES
from demo.receiver import Receiver
from demo.story import play

pytestmark = pytest.mark.needs_emulators  # the story runs its own clients on the emulators

ROWS = (
    "sync_published_count",
    "send_post_notification",
    "forward_webhook",
    "relay_outbox",
    "index_post",
    "create_order",
    "create_order_callable",
    "receive_line_webhook",
    "register_upload",
    "daily_digest",
    "alert_new_fatal_issue",
)
"""The demo's table: one row per function of main.py, in this order."""


@pytest.mark.timeout(600)  # a whole story, through the Functions emulator too: minutes
def test_demo_story_has_exactly_once_effects(tmp_path: Path, receiver: Receiver) -> None:
    """Every function's effects equal the expected count, and every delivery was acknowledged,
    although each event was delivered four times at once (an alert published twice at once)
    and failed copies were retried. The story's receiver is the session's, on the port
    `.env.local` points the Functions emulator's functions at."""
    rows = play(tmp_path, receiver)
    assert tuple(row.function for row in rows) == ROWS
    for row in rows:
        assert (row.effects, row.undelivered, row.problems) == (row.expected, 0, ()), row
        copies = ALERT_COPIES if row.function == "alert_new_fatal_issue" else 4
        assert row.deliveries >= copies * row.events or row.function.startswith("create_order")
        assert row.ok, row
