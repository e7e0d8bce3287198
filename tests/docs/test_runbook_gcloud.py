"""Every `gcloud` command of the runbook (docs/operations.md) is one gcloud accepts as typed.

The runbook's `dedup` commands run on the emulator (`tests/docs/test_runbook.py`); its `gcloud`
lines (how the firebase and gcloud paths redeliver a revived event) need a real project, so each
runs here with a fresh gcloud configuration and no account: it must fail only for want of
credentials, never for an argument or a value gcloud refuses. Placeholders become values of
their form first (a trigger's full name, a subscription id, a region).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = ROOT / "docs" / "operations.md"
PLACEHOLDERS = {
    "TRIGGER": "projects/demo-x/locations/eur3/triggers/forward-webhook-a1b2c3",
    "SUBSCRIPTION": "eventarc-eur3-forward-webhook-a1b2c3-sub-1",
    "REGION": "europe-west1",
}


def gcloud_commands() -> list[str]:
    """Every `gcloud ...` line inside the runbook's ```sh blocks (indented in a list too)."""
    blocks = re.findall(r"```sh\n(.*?)```", RUNBOOK.read_text(), re.DOTALL)
    lines = (line.split(" #", 1)[0].strip() for block in blocks for line in block.splitlines())
    return [line for line in lines if line.startswith("gcloud ")]


COMMANDS = gcloud_commands()


def test_the_runbook_redelivers_with_gcloud() -> None:
    """The firebase and gcloud paths' redelivery: find the subscription, keep acknowledged
    messages, seek (a move of the block would silence the test below)."""
    verbs = [" ".join(shlex.split(c)[1:4]) for c in COMMANDS]
    assert verbs == [
        "functions describe forward_webhook",
        "eventarc triggers describe",
        "pubsub subscriptions update",
        "pubsub subscriptions seek",
    ]
    assert "--retain-acked-messages" in COMMANDS[2]


@pytest.mark.subprocesses
@pytest.mark.skipif(shutil.which("gcloud") is None, reason="the Google Cloud CLI is not here")
@pytest.mark.parametrize("command", COMMANDS)
def test_gcloud_accepts_the_command_as_typed(command: str, tmp_path: Path) -> None:
    """Exit status non-zero for want of an account only; no argument refused."""
    typed = command
    for placeholder, value in PLACEHOLDERS.items():
        typed = typed.replace(placeholder, value)
    env = {**os.environ, "CLOUDSDK_CONFIG": str(tmp_path), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"}
    done = subprocess.run(
        shlex.split(typed), env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode != 0, typed
    assert "active account" in done.stderr, (typed, done.stderr[-600:])
    assert "unrecognized arguments" not in done.stderr, typed
    assert "Invalid value" not in done.stderr, typed
