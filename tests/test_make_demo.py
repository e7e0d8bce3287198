"""`make demo` exactly as a user types it, in a copy of the project whose every port is moved:
the Makefile, tools/emulators.py, the Firebase CLI and the demo must all take their addresses
from `firebase.json` (and `.env.local`), or the copy's demo talks to nothing, or to the
emulators of the test session that runs this test, and fails.

The copy is `tests.deploy.conftest.copy_project`'s (a fresh clone's files, with `venv` and the
Firebase CLI linked from this checkout, so `make install` finds them installed): the test costs
one demo.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.conftest import copy_project
from tools.emulators import ROOT

pytestmark = pytest.mark.own_emulators  # it starts emulators of its own, every port moved

ROWS = (
    "sync_published_count",
    "send_post_notification",
    "forward_webhook",
    "relay_outbox",
    "index_post",
    "create_order",
    "create_order_callable",
    "fulfil_order",
    "receive_line_webhook",
    "register_upload",
    "daily_digest",
    "alert_new_fatal_issue",
)
"""The demo's table: one row per function of main.py, in this order."""

PORT_SHIFT = 20003
"""Added to every port: checkouts side by side move theirs by multiples of 10, so the copy's
ports are nobody else's, and every moved port lies above the Functions emulator's workers
(tests/ports.py)."""
PORT_KEYS = ("port", "websocketPort")
DEMO_TIMEOUT_SECONDS = 600
WIDTH = 100


def move_ports(config: Any, shift: int) -> Any:
    """`firebase.json` with every emulator port (and the Firestore websocket port) moved."""
    if isinstance(config, dict):
        return {
            key: value + shift
            if key in PORT_KEYS and isinstance(value, int)
            else move_ports(value, shift)
            for key, value in config.items()
        }
    return config


def moved_copy(target: Path, shift: int) -> dict[str, int]:
    """Copy the project to `target` with its ports moved by `shift`; the moved ports by name."""
    copy_project(target)
    config = json.loads((ROOT / "firebase.json").read_text())
    moved = move_ports(config, shift)
    (target / "firebase.json").write_text(json.dumps(moved, indent=2) + "\n")
    env_local = (ROOT / ".env.local").read_text()
    receivers = {int(port) for port in re.findall(r"127\.0\.0\.1:(\d+)", env_local)}
    for port in receivers:
        env_local = env_local.replace(f"127.0.0.1:{port}", f"127.0.0.1:{port + shift}")
    (target / ".env.local").write_text(env_local)
    ports = {
        name: settings["port"]
        for name, settings in moved["emulators"].items()
        if isinstance(settings, dict) and "port" in settings
    }
    ports["firestore websocket"] = moved["emulators"]["firestore"]["websocketPort"]
    return {**ports, **{f"receiver {n}": port + shift for n, port in enumerate(receivers)}}


def user_environment() -> dict[str, str]:
    """This process's environment without what the test session and `make test` added: the
    emulators' addresses, the project, make's own variables, the functions' settings."""
    dropped = {
        "FIREBASE_EMULATOR_HUB", "GCLOUD_PROJECT", "GOOGLE_CLOUD_PROJECT", "FIREBASE_CONFIG",
        "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "FUNCTION_TARGET", "WEBHOOK_ROUTES", "NOTIFY_URL",
        "SEARCH_INDEX_URL", "PAYMENTS_URL", "RECEIPTS_URL", "COLUMNS", "PYTEST_CURRENT_TEST",
        "VIRTUAL_ENV",
    }  # fmt: skip
    return {
        name: value
        for name, value in os.environ.items()
        if name not in dropped
        and not name.endswith("_EMULATOR_HOST")
        and not name.startswith("DEDUP_")
    }


def table_rows(output: str) -> dict[str, str]:
    """Function name -> its line in the demo's table."""
    found: dict[str, str] = {}
    for line in output.splitlines():
        cells = [cell.strip() for cell in re.split(r"[│|┃]", line)]
        if len(cells) > 2 and cells[1] in ROWS:
            found[cells[1]] = line
    return found


def without_event_dumps(lines: list[str]) -> list[str]:
    """The output without the Eventarc emulator's dump of each event published to it (the CLI
    prints the event's JSON, indented over many lines, from `Received event at channel ...: {`
    to a closing `}`)."""
    kept: list[str] = []
    dumping = False
    for line in lines:
        if "Received event at channel" in line and line.rstrip().endswith("{"):
            dumping = True
        elif dumping and line.rstrip() == "}":
            dumping = False
        elif not dumping:
            kept.append(line)
    return kept


@pytest.mark.timeout(DEMO_TIMEOUT_SECONDS + 60)
@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_as_typed_in_a_checkout_with_every_port_moved(tmp_path: Path) -> None:
    """`make demo` in the copy exits 0, and its table, readable at 100 columns, has one row
    per function, each marked ok."""
    copy = tmp_path / "project"
    ports = moved_copy(copy, PORT_SHIFT)
    assert (
        ports["firestore"]
        != json.loads((ROOT / "firebase.json").read_text())["emulators"]["firestore"]["port"]
    )
    result = subprocess.run(
        ["make", "demo"],
        cwd=copy,
        env=user_environment(),
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_SECONDS,
        check=False,
    )
    output = result.stdout + result.stderr
    shown = f"make demo (ports {ports}) exited {result.returncode}:\n{output[-6000:]}"
    assert result.returncode == 0, shown
    rows = table_rows(result.stdout)
    assert list(rows) == list(ROWS), shown
    for function, line in rows.items():
        assert " ok " in line, (function, shown)
        assert "MISMATCH" not in line, (function, shown)
    assert "Every effect happened exactly once." in result.stdout, shown
    lines = without_event_dumps(result.stdout.splitlines())
    start = next(n for n, line in enumerate(lines) if line.startswith("Each event or request"))
    end = next(n for n, line in enumerate(lines) if "Every effect happened exactly once." in line)
    demo_output = [  # the table, and what each row counted (the CLI's lines are interleaved)
        line
        for line in lines[start : end + 1]
        if any(box in line for box in "┏┃┡│└") or line.startswith((*ROWS, " "))
    ]
    assert len(demo_output) >= 2 * len(ROWS), lines[start : end + 1]
    too_wide = [line for line in demo_output if len(line) > WIDTH]
    assert not too_wide, too_wide  # the demo's own output; make's and the CLI's are theirs
    print(shown, file=sys.stderr)
