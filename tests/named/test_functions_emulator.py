"""The Functions emulator fires a Python function from a named Firestore database, and its dedup
records land in that database.

The suite's own emulators serve main.py, which declares no named-database function, so this
test runs a second, private set (Firestore and Functions only) in a copy of the project with a
function added the way the README says and every emulator port moved by `PORT_SHIFT`, and
probes it from inside (`tests/named/probe.py` through `tools/emulators.py exec`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.conftest import add_function, copy_project
from tests.named.functions import NAMED_DATABASE
from tests.named.probe import PROBE_MARK

PORT_SHIFT = 11000
"""Moves every port of firebase.json up by 11000: free of the suite's emulators, its receiver and
the Functions emulator's workers (tests/ports.py)."""

PROBED = f'''"""Counts the probe's orders of the named database {NAMED_DATABASE}.

A throwaway function: no function of main.py listens to `probeOrders`."""

from firebase_functions import firestore_fn
from google.cloud import firestore

from dedup import Delivery, Mode, trigger_once


@firestore_fn.on_document_created(document="probeOrders/{{orderId}}", database="{NAMED_DATABASE}")
@trigger_once("named_probe", mode=Mode.TRANSACTION)
def named_probe(
    event: firestore_fn.Event[firestore_fn.DocumentSnapshot | None], delivery: Delivery
) -> None:
    """Count the order in the event's database, in the transaction of the marker."""
    assert delivery.transaction is not None
    ref = delivery.client.collection("orderCounts").document(event.params["orderId"])
    delivery.transaction.set(
        ref, {{"n": firestore.Increment(1), "database": event.database}}, merge=True
    )
'''


def shift_ports(project: Path) -> None:
    """Move every emulator port of the copy's firebase.json by `PORT_SHIFT`, the Firestore
    emulator's websocket port included."""
    path = project / "firebase.json"
    config = json.loads(path.read_text())
    for settings in config["emulators"].values():
        for key in ("port", "websocketPort"):
            if isinstance(settings, dict) and key in settings:
                settings[key] += PORT_SHIFT
    path.write_text(json.dumps(config, indent=2))


def private_environment() -> dict[str, str]:
    """This process's environment without the variables that point at the suite's emulators
    (the private set exports its own)."""
    return {name: value for name, value in os.environ.items() if "EMULATOR" not in name}


@pytest.mark.needs_emulators
def test_the_functions_emulator_triggers_a_function_of_a_named_database(tmp_path: Path) -> None:
    """A document created in the named database fires the function once; the count and the
    record are in the named database; the same write in (default) fires nothing."""
    project = copy_project(tmp_path / "project")
    add_function(project, "named_probe", PROBED, "named_probe")
    shift_ports(project)
    done = subprocess.run(
        [sys.executable, "tools/emulators.py", "exec", "--only", "functions,firestore", "--",
         sys.executable, "-m", "tests.named.probe"],
        cwd=project, env=private_environment(), capture_output=True, text=True, timeout=420,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-2000:])
    printed = [line for line in done.stdout.splitlines() if line.startswith(PROBE_MARK)]
    assert printed, done.stdout[-3000:]
    found = json.loads(printed[0].removeprefix(PROBE_MARK))
    assert found["named_counts"] == {"o1": {"n": 1, "database": NAMED_DATABASE}}
    assert found["named_records"] == 1
    assert found["default_counts"] == {}
    assert found["default_records"] == 0
