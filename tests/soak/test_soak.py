"""The short soak: `python -m soak` for 20 s finds no violation of exactly-once.

The same run as `make soak` (function processes SIGKILLed at random, an emulator restart,
lost commit responses, a failing and stalling receiver), shortened to fit `make test`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from soak.emulator import ROOT

pytestmark = pytest.mark.own_emulators  # its own Firestore emulator

INTEGER_KEYS = (
    "events",
    "deliveries",
    "kills",
    "restarts",
    "injected_faults",
    "effects",
    "violations",
    "deaths_in_drain",
    "function_timeout_s",
)
DRAIN_CAP_SECONDS = 240
SUBPROCESS_TIMEOUT_SECONDS = 20 + DRAIN_CAP_SECONDS + 160
"""The run, its drain's cap, and the emulator's start-up, restarts and final reads."""


@pytest.mark.timeout(SUBPROCESS_TIMEOUT_SECONDS + 30)
def test_short_soak_has_no_violation(tmp_path: Path) -> None:
    """Under every fault the soak injects, each effect happens exactly once, under one key (an
    at-most-once step's never twice), and no delivery outlasts its function's timeout by more
    than a second."""
    out = tmp_path / "results.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "soak",
            "--seconds=20",
            "--restart-interval=9",
            "--kill-interval=3",
            # The drain rule of `make soak` (soak.drain): it ends when every copy is
            # acknowledged, else 90 s after the later of its start and the last process death
            # (a process killed inside a transaction leaves its locks for 60 s, and the
            # event's copies wait them out). Only its cap is shorter, to fit make test.
            f"--drain-cap-seconds={DRAIN_CAP_SECONDS}",
            f"--out={out}",
            f"--workdir={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_SECONDS,
        check=False,
    )
    assert out.exists(), run.stdout + run.stderr
    results = json.loads(out.read_text())
    for key in INTEGER_KEYS:
        assert isinstance(results[key], int), key
    assert isinstance(results["violation_examples"], list)
    assert isinstance(results["wall_s"], float)
    assert isinstance(results["drain_s"], float)
    assert results["drain_s"] <= DRAIN_CAP_SECONDS + 1
    assert results["violations"] == 0, "\n".join(results["violation_examples"])
    assert run.returncode == 0, run.stdout + run.stderr
    assert results["events"] >= 10
    assert results["kills"] >= 1
    assert results["restarts"] >= 1
    assert results["injected_faults"] >= 1
    # Five exactly-once effects per event (notify's key, count, batch_count, the steps'
    # transaction and keyed POST), and the at-most-once receipts, none of them twice.
    details = results["details"]
    receipts = details["steps"]["receipts_applied"]
    assert results["effects"] == 5 * results["events"] + receipts
    assert sum(details["effects_by_function"].values()) == results["effects"]
    assert details["effects_by_function"]["steps.post"] == results["events"]
    assert receipts <= results["events"]
    assert set(details["checks"].values()) == {0}
    longest = results["details"]["longest_delivery_of"]
    assert results["longest_delivery_s"] <= results["function_timeout_s"] + 1, longest
