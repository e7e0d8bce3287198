"""`dedup show EVENT_ID SUFFIX` maps ids in the functions' key layout (DEDUP_KEY_LAYOUT)."""

from __future__ import annotations

import json

import pytest
from google.cloud import firestore

from dedup import DedupConfig, Deduplicator, dedup_key
from tests.cli.conftest import Invoke


def test_the_cli_maps_event_id_and_suffix_in_the_functions_layout(
    firestore_client: firestore.Client, invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dedup show EVENT_ID SUFFIX` finds a spread record when DEDUP_KEY_LAYOUT=spread, as the
    functions set it; by its key it is found in either layout."""
    spread = Deduplicator(DedupConfig(key_layout="spread"), client=firestore_client)
    spread.run("5550002", "spreadCli", lambda d: None)
    key = dedup_key("5550002", "spreadCli", "spread")
    monkeypatch.setenv("DEDUP_KEY_LAYOUT", "spread")
    shown = invoke("show", "5550002", "spreadCli", "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["key"] == key
    monkeypatch.delenv("DEDUP_KEY_LAYOUT")
    assert invoke("show", "5550002", "spreadCli").exit_code != 0  # plain key: no record
    assert invoke("show", key, "--json").exit_code == 0
