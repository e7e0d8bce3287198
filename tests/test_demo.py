"""`make demo` tells the truth: its story, played here, ends with every row matching."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo.story import play

pytestmark = pytest.mark.needs_emulators  # the story runs its own clients on the emulators


def test_demo_story_has_exactly_once_effects(tmp_path: Path) -> None:
    """Every function's effects equal the expected count, and every delivery was acknowledged,
    although each event was delivered four times at once and failed copies were retried."""
    rows = play(tmp_path)
    assert [row.function for row in rows] == [
        "sync_published_count",
        "send_post_notification",
        "forward_webhook",
        "relay_outbox",
        "index_post",
    ]
    for row in rows:
        assert (row.effects, row.undelivered) == (row.expected, 0), row
        assert row.deliveries >= 4 * row.events, row
