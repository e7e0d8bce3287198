"""Every `dedup` command of the runbook (docs/operations.md) works as typed, on the emulator.

Each command line of the runbook's shell blocks runs against records of the real functions
(suffixes such as `forward_webhook`) in every state the runbook talks about, exactly as
written but for the placeholders EVENT_ID and KEY. A command that names a suffix no function
has, uses a flag the CLI does not know, or finds nothing where the runbook promises records,
fails its test.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from google.cloud import firestore

from dedup.cli import cli
from dedup.kernel.record import State
from tests.cli import records
from tests.cli.records import record_fields
from tests.conftest import PROJECT

ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = ROOT / "docs" / "operations.md"
EVENT_ID = "4242"
"""What the runbook's EVENT_ID stands for: the event of the stuck and the poisoned record."""
UID = "ann"
"""What the runbook's UID stands for: the signed-in caller of an HTTP request (KEY is its
Idempotency-Key, EVENT_ID's value)."""


def function_suffixes() -> set[str]:
    """The suffixes of the project's functions (each module under functions/ names its own)."""
    found = set()
    for module in (ROOT / "functions").glob("*.py"):
        found.update(re.findall(r'^SUFFIX = "([^"]+)"$', module.read_text(), re.MULTILINE))
    return found


def runbook_commands() -> list[str]:
    """Every `dedup ...` line inside the runbook's ```sh blocks, comments removed."""
    blocks = re.findall(r"```sh\n(.*?)```", RUNBOOK.read_text(), re.DOTALL)
    lines = (line.split(" #", 1)[0].strip() for block in blocks for line in block.splitlines())
    return [line for line in lines if line.startswith("dedup ")]


def seed(db: firestore.Client) -> None:
    """The records the runbook's situations start from."""
    day = timedelta(days=1)
    records.write(
        db,
        [
            # An event is stuck: a crashed notification under a live lease.
            record_fields(
                EVENT_ID, "send_post_notification", state=State.IN_PROGRESS, lease="live"
            ),
            record_fields("4240", "send_post_notification", state=State.IN_PROGRESS),
            # A poison event, a receiver that was down: dead and failed webhook forwards.
            record_fields(EVENT_ID, "forward_webhook", state=State.DEAD, attempts=10),
            record_fields("4243", "forward_webhook", state=State.FAILED, last_error="400"),
            record_fields("4244", "forward_webhook", state=State.IN_PROGRESS, lease="expired"),
            record_fields("4245", "relay_outbox", state=State.DEAD, attempts=10),
            # An effect that may or may not have happened: an ambiguous notification skipped.
            record_fields("4248", "send_post_notification", state=State.UNKNOWN),
            # Cleaning up: records older than the retention.
            record_fields("4246", "sync_published_count", age=10 * day),
            record_fields("4247", "send_post_notification", age=8 * day),
            # Find the record of an HTTP request: ann's order with Idempotency-Key 4242.
            record_fields(f"{UID}:{EVENT_ID}", "create_order", subject=f"users/{UID}"),
        ],
    )


COMMANDS = runbook_commands()


def test_the_runbook_has_commands() -> None:
    """The runbook is where these tests look for commands (a move would silence them)."""
    assert len(COMMANDS) >= 10


@pytest.mark.parametrize("command", COMMANDS)
def test_runbook_command_works_as_typed(command: str, firestore_client: firestore.Client) -> None:
    """The command exits 0, names only real suffixes, and shows the records it is about."""
    seed(firestore_client)
    typed = command.replace("EVENT_ID", EVENT_ID).replace("KEY", EVENT_ID).replace("UID", UID)
    args = shlex.split(typed)[1:]
    named = {args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--suffix"}
    if args[0] == "show" and len(args) > 2 and not args[2].startswith("-"):
        named.add(args[2])
    unknown = named - function_suffixes()
    assert not unknown, f"{command}: no function has the suffix {unknown}"

    runner = CliRunner(env={"GOOGLE_CLOUD_PROJECT": PROJECT, "COLUMNS": "200"})
    result = runner.invoke(cli, args, input="y\n")
    assert result.exit_code == 0, f"{command}\n{result.output}"
    for suffix in named:
        assert suffix in result.output, f"{command} found no {suffix} record:\n{result.output}"
    if args[0] in ("release", "revive"):
        assert re.search(r"(released|revived) [1-9]\d* record", result.output), result.output


def test_dedup_is_on_the_venv_path(firestore_client: firestore.Client) -> None:
    """`make install` puts the `dedup` command next to the venv's python; it runs as typed."""
    seed(firestore_client)
    dedup = Path(sys.executable).parent / "dedup"
    result = subprocess.run(
        [str(dedup), "stats"],
        env={
            "PATH": str(dedup.parent),
            "GOOGLE_CLOUD_PROJECT": PROJECT,
            "COLUMNS": "200",
            "FIRESTORE_EMULATOR_HOST": os.environ["FIRESTORE_EMULATOR_HOST"],
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "forward_webhook" in result.stdout
