"""Run inside `tools/emulators.py exec` by tests/named/test_functions_emulator.py: create an
order in `probeOrders` of the named database and one in (default) (a collection no function of
main.py listens to, so only the throwaway function can write a record), wait for the
named-database function, and print what each database holds as one JSON line.

    python -m tests.named.probe
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from google.cloud import firestore

from tests.named.functions import COUNTS, NAMED_DATABASE

PROBE_MARK = "probe: "
"""Starts the line with the result (the emulators print their own lines around it)."""
WAIT_SECONDS = 90.0
"""How long the Functions emulator gets to run the function (a cold Python worker included)."""


def snapshot(client: firestore.Client) -> dict[str, Any]:
    """The counts and the number of dedup records in `client`'s database."""
    counts = {d.id: d.to_dict() for d in client.collection(COUNTS).stream()}
    records = sum(1 for _ in client.collection("triggerEvents").list_documents())
    return {"counts": counts, "records": records}


def main() -> None:
    """Write the two orders, wait for the named database's count, print both databases."""
    project = os.environ["GCLOUD_PROJECT"]
    named = firestore.Client(project=project, database=NAMED_DATABASE)
    default = firestore.Client(project=project)
    named.collection("probeOrders").document("o1").set({"total": 5})
    default.collection("probeOrders").document("o2").set({"total": 7})
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline and not snapshot(named)["counts"]:
        time.sleep(0.5)
    time.sleep(3)  # let a second (duplicate or wrong-database) run show itself
    in_named, in_default = snapshot(named), snapshot(default)
    print(
        PROBE_MARK
        + json.dumps(
            {
                "named_counts": in_named["counts"],
                "named_records": in_named["records"],
                "default_counts": in_default["counts"],
                "default_records": in_default["records"],
            }
        )
    )


if __name__ == "__main__":
    main()
