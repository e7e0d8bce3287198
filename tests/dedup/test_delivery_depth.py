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

MAX_MODULES = 14
"""The most `dedup.*` modules (`dedup.testing` aside) a fresh lease-mode delivery of a Pub/Sub
event under `trigger_once` may run code in, its records in Firestore through a `RecordStore`
over a sync client, as deployed. Lower it with each merge; never raise it. (Raised twice, from
12, by two ideas that each got one home: an instance's per-key turns, `dedup.kernel.turns`,
out of `kernel.delivery`; and a delivery's time, `dedup.kernel.budget`, which took every
deadline out of `run`, `lease`, `atomic`, `store` and `step_writes`.)"""


def modules_on_path(function: str = "on_job") -> Counter[str]:
    """The `dedup.*` modules (with how many calls each) the second of two fresh deliveries to
    `function` of `depth_app` runs code in, served by functions-framework as the platform
    serves it; the first warms what a process does once (the deduplicator, the client, the
    logger, imports)."""
    client = functions_framework.create_app(function, str(APP), "cloudevent").test_client()
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


def assert_few(calls: Counter[str]) -> None:
    """At most `MAX_MODULES` modules, lease mode's among them."""
    assert "dedup.kernel.lease" in calls, "the measured delivery did not run lease mode"
    assert "dedup.kernel.store" in calls, "the measured delivery did not reach the store"
    listing = ", ".join(f"{name} ({n})" for name, n in sorted(calls.items()))
    assert len(calls) <= MAX_MODULES, f"{len(calls)} modules on the path: {listing}"


def test_a_delivery_runs_code_in_few_modules(firestore_host: str) -> None:
    """A fresh lease-mode delivery under `trigger_once`, its records in Firestore (the
    emulator) through a `RecordStore`, runs code in at most `MAX_MODULES` of dedup's modules
    (each should do work there, not only forward)."""
    assert_few(modules_on_path("on_job"))


def test_a_delivery_on_the_in_memory_store_runs_code_in_as_few() -> None:
    """The same bar on the tests' in-memory store, which the flows reach as they reach a
    `RecordStore` (nothing between them), checked without an emulator."""
    assert_few(modules_on_path("on_job_in_memory"))
