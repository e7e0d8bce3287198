"""`make demo` tells the truth: its story, played here, ends with every row matching."""

from __future__ import annotations

from pathlib import Path

import pytest

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
)
"""The demo's table: one row per function of main.py, in this order."""


@pytest.mark.timeout(600)  # a whole story, through the Functions emulator too: minutes
def test_demo_story_has_exactly_once_effects(tmp_path: Path) -> None:
    """Every function's effects equal the expected count, and every delivery was acknowledged,
    although each event was delivered four times at once and failed copies were retried."""
    rows = play(tmp_path)
    assert tuple(row.function for row in rows) == ROWS
    for row in rows:
        assert (row.effects, row.undelivered, row.problems) == (row.expected, 0, ()), row
        assert row.deliveries >= 4 * row.events or row.function.startswith("create_order"), row
        assert row.ok, row
