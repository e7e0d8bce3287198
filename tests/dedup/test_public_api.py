"""The public API of `dedup` stays source-compatible: every name of `dedup.__all__`,
`dedup.http`, `dedup.tasks`, `dedup.outbox`, `dedup.aio`, `dedup.testing` and `dedup.send` as
released (pinned in `tests/dedup/public_api.json`) is still there, with parameters a call
written for it still fits. New names and new optional parameters are allowed."""

from __future__ import annotations

import json
from pathlib import Path

from tests.dedup.api_surface import incompatibilities, surface

PINNED = Path(__file__).resolve().parent / "public_api.json"


def test_every_released_name_and_signature_still_serves_its_callers() -> None:
    """Nothing pinned is gone, renamed, reordered or newly required."""
    assert incompatibilities(json.loads(PINNED.read_text()), surface()) == []


def test_the_check_can_fail() -> None:
    """A removed name, a removed parameter and a new required one are each reported."""
    pinned = json.loads(PINNED.read_text())
    changed = json.loads(PINNED.read_text())
    del changed["dedup"]["trigger_once"]
    task_once = changed["dedup.tasks"]["task_once"]["parameters"]
    task_once[:] = [p for p in task_once if p[0] != "registry"] + [["extra", "KEYWORD_ONLY", None]]
    found = incompatibilities(pinned, changed)
    assert "dedup.trigger_once is gone" in found
    assert any(p.startswith("dedup.tasks.task_once: parameter registry removed") for p in found)
    assert incompatibilities(pinned, pinned) == []
    changed = json.loads(PINNED.read_text())
    changed["dedup.tasks"]["task_once"]["parameters"].append(["extra", "KEYWORD_ONLY", None])
    assert incompatibilities(pinned, changed) == [
        "dedup.tasks.task_once: new required parameter extra"
    ]
