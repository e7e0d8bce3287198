"""The runbook's `eval "$(venv/bin/python tools/emulators.py env)"` points a shell at the
emulators: the addresses of firebase.json and the emulators' project."""

from __future__ import annotations

import json
import subprocess

from tests.deploy.conftest import ROOT


def test_eval_of_env_sets_the_emulator_hosts_and_project() -> None:
    """After the eval, client libraries find Firestore, Pub/Sub and the hub, and the project id
    is the emulators' (even when the shell named another project before)."""
    script = (
        'export GOOGLE_CLOUD_PROJECT=my-project; eval "$(venv/bin/python tools/emulators.py env)"; '
        "for v in FIRESTORE_EMULATOR_HOST PUBSUB_EMULATOR_HOST FIREBASE_EMULATOR_HUB "
        'GCLOUD_PROJECT GOOGLE_CLOUD_PROJECT; do echo "$v=${!v}"; done'
    )
    done = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    values = dict(line.split("=", 1) for line in done.stdout.splitlines())
    emulators = json.loads((ROOT / "firebase.json").read_text())["emulators"]
    address = {name: f"{emulators[name]['host']}:{emulators[name]['port']}" for name in emulators
               if isinstance(emulators[name], dict) and "port" in emulators[name]}  # fmt: skip
    assert values == {
        "FIRESTORE_EMULATOR_HOST": address["firestore"],
        "PUBSUB_EMULATOR_HOST": address["pubsub"],
        "FIREBASE_EMULATOR_HUB": address["hub"],
        "GCLOUD_PROJECT": "demo-exactly-once",
        "GOOGLE_CLOUD_PROJECT": "demo-exactly-once",
    }
