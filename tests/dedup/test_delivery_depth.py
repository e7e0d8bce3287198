"""How many of dedup's modules one delivery runs code in: the bar may only go down.

A reader follows a delivery through every module it touches; a module that only passes a call
on costs a reader as much as one that decides something. docs/architecture.md draws the path.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import functions_framework

from dedup import testing

APP = Path(__file__).with_name("depth_app.py")

MAX_MODULES = 13
"""The most `dedup.*` modules (`dedup.testing` aside) a fresh lease-mode delivery of a Pub/Sub
event under `trigger_once` may run code in. Lower it with each merge; never raise it. (Raised
once, from 12: the delivery's time budget got its one module, `dedup.kernel.budget`, which took
every deadline out of `run`, `lease`, `atomic`, `store` and `step_writes`.)"""


def modules_on_path() -> Counter[str]:
    """The `dedup.*` modules (with how many calls each) the second of two fresh deliveries runs
    code in, served by functions-framework as the platform serves it; the first warms what a
    process does once (the deduplicator, the logger, imports)."""
    client = functions_framework.create_app("on_job", str(APP), "cloudevent").test_client()
    post = testing.via_test_client(client)
    assert post(testing.pubsub_event("jobs", b"first", message_id="depth-1")) == 200
    calls: Counter[str] = Counter()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            if module.startswith("dedup") and not module.startswith("dedup.testing"):
                calls[module] += 1

    second = testing.pubsub_event("jobs", b"second", message_id="depth-2")
    sys.setprofile(profile)
    try:
        status = post(second)
    finally:
        sys.setprofile(None)
    assert status == 200
    return calls


def test_a_delivery_runs_code_in_few_modules() -> None:
    """A fresh lease-mode delivery under `trigger_once` runs code in at most `MAX_MODULES` of
    dedup's modules (each should do work there, not only forward)."""
    calls = modules_on_path()
    assert "dedup.kernel.lease" in calls, "the measured delivery did not run lease mode"
    listing = ", ".join(f"{name} ({n})" for name, n in sorted(calls.items()))
    assert len(calls) <= MAX_MODULES, f"{len(calls)} modules on the path: {listing}"
