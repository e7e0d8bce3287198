"""The spread key layout (`DEDUP_KEY_LAYOUT=spread`): a hash prefix in front of every key, so
sequential event ids (Pub/Sub message ids) do not write one key range (docs/capacity.md).

The layout must keep every guarantee of the plain one: one effect per event in every mode, the
CLI finding a record by EVENT_ID SUFFIX, and clients kept out of the records by the rules.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest
import requests
from google.cloud import firestore

from dedup import ConfigError, DedupConfig, Delivery, Mode, OutcomeKind, Record, dedup_key
from dedup.kernel.transitions import MAX_KEY_BYTES, spread_prefix
from tests.dedup.conftest import EFFECTS, MakeDedup
from tests.security.test_rules import ANONYMOUS, read, signed_in


def test_spread_keys_put_a_hash_of_the_event_id_before_the_plain_key() -> None:
    """A spread key is sha256(event id)[:4] + "." + the plain key: deterministic, still ending
    in -<suffix>, and the same prefix for every function of one event."""
    digest = hashlib.sha256(b"17283940").hexdigest()[:4]
    assert dedup_key("17283940", "mail", "spread") == f"{digest}.17283940-mail"
    assert dedup_key("17283940", "count", "spread") == f"{digest}.17283940-count"
    assert dedup_key("17283940", "mail") == "17283940-mail"


def test_sequential_event_ids_get_scattered_spread_keys() -> None:
    """Consecutive message ids, whose plain keys are in order, get prefixes spread over the
    key space: 1,000 consecutive ids land in hundreds of distinct 2-character ranges."""
    ids = [str(10_000_000_000 + n) for n in range(1000)]
    plain = [dedup_key(i, "s") for i in ids]
    spread = [dedup_key(i, "s", "spread") for i in ids]
    assert plain == sorted(plain)
    assert spread != sorted(spread)
    assert len({key[:2] for key in spread}) > 200


def test_spread_keys_stay_valid_document_ids() -> None:
    """The prefix counts against the 1,500-byte limit: an id that just fits plain is mapped
    when spread, and unsafe ids are mapped as in the plain layout."""
    long_id = "x" * (MAX_KEY_BYTES - len("-s"))
    assert dedup_key(long_id, "s") == f"{long_id}-s"
    spread = dedup_key(long_id, "s", "spread")
    assert len(spread.encode()) <= MAX_KEY_BYTES
    assert spread.startswith(spread_prefix(long_id) + "~")
    for unsafe in ("a/b", "..", "__x__", "é"):
        key = dedup_key(unsafe, "s", "spread")
        assert "/" not in key
        assert key.startswith(spread_prefix(unsafe) + "~")


def test_the_layout_is_validated_where_it_is_configured() -> None:
    """DEDUP_KEY_LAYOUT accepts plain or spread; anything else names the variable."""
    assert DedupConfig.from_env({}).key_layout == "plain"
    assert DedupConfig.from_env({"DEDUP_KEY_LAYOUT": "spread"}).key_layout == "spread"
    with pytest.raises(ConfigError, match="DEDUP_KEY_LAYOUT must be one of plain, spread"):
        DedupConfig.from_env({"DEDUP_KEY_LAYOUT": "hashed"})
    with pytest.raises(ConfigError, match="key_layout"):
        DedupConfig(key_layout="hashed")  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", list(Mode))
def test_a_spread_collection_runs_each_effect_once(
    mode: Mode,
    make_dedup: MakeDedup,
    firestore_client: firestore.Client,
    read_record: Callable[[str], Record | None],
) -> None:
    """With the spread layout a duplicate is still a duplicate, in every mode: the record is
    written at the spread key, a second instance (cold cache) skips the event, and the effect
    is applied once (in write-only mode the duplicate's handler fills a batch that never
    commits, so what counts is the committed effect)."""
    first, second = make_dedup(key_layout="spread"), make_dedup(key_layout="spread")
    runs: list[str] = []

    def handler(delivery: Delivery) -> None:
        runs.append(delivery.key)
        effect = firestore_client.collection(EFFECTS).document(delivery.key)
        if delivery.transaction is not None:
            delivery.transaction.set(effect, {"n": firestore.Increment(1)}, merge=True)
        elif delivery.batch is not None:
            delivery.batch.set(effect, {"n": firestore.Increment(1)}, merge=True)
        else:
            effect.set({"n": firestore.Increment(1)}, merge=True)

    ran = first.run("5550001", "spreadTest", handler, mode=mode)
    again = second.run("5550001", "spreadTest", handler, mode=mode)
    key = dedup_key("5550001", "spreadTest", "spread")
    assert ran.kind is OutcomeKind.RAN
    assert ran.key == key
    assert again.kind is OutcomeKind.DUPLICATE
    assert runs[0] == key
    effect = firestore_client.collection(EFFECTS).document(key).get().to_dict()
    assert effect == {"n": 1}
    stored = read_record(key)
    assert stored is not None
    assert stored.event_id == "5550001"
    assert read_record(dedup_key("5550001", "spreadTest")) is None  # nothing at the plain key


@pytest.mark.shared_emulators  # the security rules `make test` loads
def test_rules_keep_clients_out_of_spread_records(make_dedup: MakeDedup) -> None:
    """firestore.rules match every key of triggerEvents: clients can read no spread record."""
    make_dedup(key_layout="spread").run("5550003", "spreadRules", lambda d: None)
    path = f"triggerEvents/{dedup_key('5550003', 'spreadRules', 'spread')}"
    assert read(ANONYMOUS, path) == requests.codes.forbidden
    assert read(signed_in("ann"), path) == requests.codes.forbidden
