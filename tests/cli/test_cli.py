"""The operator command line, every command run in-process against the Firestore emulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta

import pytest
from click.testing import CliRunner
from google.cloud import firestore

from dedup import DedupConfig, Deduplicator, Delivery, OutcomeKind
from dedup.cli import cli
from dedup.cli.guarded import GuardedWrite, apply_guarded
from dedup.kernel.record import Field, State
from dedup.kernel.transitions import dedup_key
from tests.cli import records
from tests.cli.conftest import Invoke
from tests.cli.records import record_fields

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


# --- show -------------------------------------------------------------------------------------


def test_show_by_event_id_and_suffix_is_readable(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """`show EVENT_ID SUFFIX` finds the record by its computed key and explains its lease."""
    records.write(firestore_client, [record_fields("e1", state=State.IN_PROGRESS, lease="live")])
    result = invoke("show", "e1", "sendEmail")
    assert result.exit_code == 0, result.output
    assert "triggerEvents/e1-sendEmail" in result.stdout
    assert "in_progress" in result.stdout
    assert "live, owner owner-e1, expires in" in result.stdout


def test_show_json_by_key_has_the_schema_fields(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """`show KEY --json` prints one JSON object with the record's schema field names."""
    records.write(firestore_client, [record_fields("e1", state=State.DEAD, attempts=10)])
    result = invoke("show", "e1-sendEmail", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["key"] == "e1-sendEmail"
    assert shown[Field.STATE] == "dead"
    assert shown[Field.ATTEMPTS] == 10
    assert shown["leaseStatus"] == "none"
    assert shown[Field.FIRST_ATTEMPT_AT].endswith("+00:00")


def test_show_maps_an_unsafe_event_id_like_the_deduplicator(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """An event id that cannot be a document id is looked up under its safe key."""
    event_id = "projects/p/databases/(default)/documents/posts/1"
    records.write(firestore_client, [record_fields(event_id)])
    result = invoke("show", event_id, "sendEmail", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["key"] == dedup_key(event_id, "sendEmail")


def test_show_missing_record_fails_with_a_hint(invoke: Invoke) -> None:
    """A missing record is one line on stderr and exit status 1."""
    result = invoke("show", "nope", "sendEmail")
    assert result.exit_code == 1
    assert "no record triggerEvents/nope-sendEmail" in result.stderr
    assert "dedup list --suffix" in result.stderr


# --- list -------------------------------------------------------------------------------------


def test_list_json_is_newest_first(invoke: Invoke, firestore_client: firestore.Client) -> None:
    """`list --json` is a JSON array ordered by first attempt, newest first."""
    records.write(firestore_client, [record_fields(f"e{h}", age=h * HOUR) for h in (2, 0, 1)])
    result = invoke("list", "--json")
    assert result.exit_code == 0, result.output
    assert [r["eventId"] for r in json.loads(result.stdout)] == ["e0", "e1", "e2"]


def test_list_filters_by_state_suffix_and_age(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """--state, --suffix and --older-than narrow the list together."""
    records.write(
        firestore_client,
        [
            record_fields("old-dead", "a", state=State.DEAD, age=2 * HOUR),
            record_fields("new-dead", "a", state=State.DEAD),
            record_fields("old-sent", "a", age=timedelta(minutes=150)),
            record_fields("old-dead-b", "b", state=State.DEAD, age=3 * HOUR),
        ],
    )

    def keys(*args: str) -> list[str]:
        result = invoke("list", "--json", *args)
        assert result.exit_code == 0, result.output
        return [r["key"] for r in json.loads(result.stdout)]

    assert keys("--state", "dead", "--suffix", "a", "--older-than", "1h") == ["old-dead-a"]
    assert keys("--state", "dead") == ["new-dead-a", "old-dead-a", "old-dead-b-b"]
    assert keys("--older-than", "90m", "--suffix", "a") == ["old-dead-a", "old-sent-a"]
    assert keys("--limit", "1") == ["new-dead-a"]


def test_list_finds_the_records_of_a_document(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """ "Alice got no welcome mail": records keep the document their event was about, and
    `list --subject users/alice` finds them for every function."""
    records.write(
        firestore_client,
        [
            record_fields("e1", "welcome_mail", subject="users/alice", state=State.DEAD),
            record_fields("e2", "count_users", subject="users/alice", age=HOUR),
            record_fields("e3", "welcome_mail", subject="users/bob"),
        ],
    )
    result = invoke("list", "--json", "--subject", "users/alice")
    assert result.exit_code == 0, result.output
    found = [(r["key"], r["state"]) for r in json.loads(result.stdout)]
    assert found == [("e1-welcome_mail", "dead"), ("e2-count_users", "sent")]


def test_list_table_is_readable(invoke: Invoke, firestore_client: firestore.Client) -> None:
    """The default output is a table naming each record, its state and its lease."""
    records.write(
        firestore_client, [record_fields("e1", state=State.IN_PROGRESS, lease="expired", age=DAY)]
    )
    result = invoke("list")
    assert result.exit_code == 0, result.output
    assert "e1-sendEmail" in result.stdout
    assert "expired" in result.stdout
    assert "1d 0h ago" in result.stdout


def test_list_keeps_each_key_on_one_line_at_80_columns(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """A key is never wrapped in the table, even in an 80-column terminal: operators copy it
    into `show` and `release`."""
    event_id = "projects-demo-messages-16500123456789012"
    records.write(firestore_client, [record_fields(event_id, "forward_webhook", age=DAY)])
    result = invoke("list", env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert f"{event_id}-forward_webhook" in result.stdout


def test_list_piped_keeps_whole_keys_of_any_length(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """Piped (no terminal, COLUMNS unset), the table is not cut to 80 columns: a key longer
    than a terminal line is printed whole, on one line, for the script reading it."""
    event_id = "Xq7" * 20 + ":0b5c6b0e-5f0c-4d55-9d0c-3c8f6a1e2b7d"
    records.write(firestore_client, [record_fields(event_id, "create_order", age=DAY)])
    result = invoke("list", env={"COLUMNS": None})
    assert result.exit_code == 0, result.output
    assert f"{event_id}-create_order" in result.stdout


def test_list_of_nothing_says_so(invoke: Invoke) -> None:
    """An empty result is a sentence, and an empty JSON array for scripts."""
    assert "no records" in invoke("list").stdout
    assert json.loads(invoke("list", "--json").stdout) == []


# --- release ----------------------------------------------------------------------------------


def test_release_hands_a_live_lease_back(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """After `release --yes` the record is in progress with no lease (the owner's token kept,
    so a handler still running can record its outcome)."""
    (key,) = records.write(
        firestore_client, [record_fields("e1", state=State.IN_PROGRESS, lease="live", attempts=3)]
    )
    result = invoke("release", key, "--yes")
    assert result.exit_code == 0, result.output
    assert "warning: 1 lease(s) still live" in result.stdout
    record = records.read(firestore_client, key)
    assert record is not None
    assert (record.state, record.owner, record.lease_started_at) == (
        State.IN_PROGRESS,
        "owner-e1",
        None,
    )
    assert not record.has_lease
    assert record.attempts == 3


def test_release_refused_at_the_prompt_changes_nothing(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """Answering no to the confirmation leaves every record exactly as it was."""
    keys = records.write(
        firestore_client,
        [record_fields(f"e{i}", state=State.IN_PROGRESS, lease="expired") for i in range(3)],
    )
    before = records.raw(firestore_client, keys)
    result = invoke("release", *keys, input="n\n")
    assert result.exit_code == 1
    assert "Release the lease of 3 record(s)" in result.stdout
    assert records.raw(firestore_client, keys) == before


def test_release_reports_keys_it_cannot_release(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """Missing or final records are named, left alone, and make the exit status 1."""
    keys = records.write(
        firestore_client,
        [
            record_fields("sent"),
            record_fields("dead", state=State.DEAD),
            record_fields("stuck", state=State.IN_PROGRESS, lease="expired"),
        ],
    )
    before = records.raw(firestore_client, keys[:2])
    result = invoke("release", *keys, "missing-sendEmail", "--yes")
    assert result.exit_code == 1
    assert "state is sent, not in_progress" in result.stdout
    assert "use `dedup revive`" in result.stdout
    assert "no such record" in result.stdout
    assert "3 of 4 record(s) were not released" in result.stderr
    assert records.raw(firestore_client, keys[:2]) == before
    stuck = records.read(firestore_client, keys[2])
    assert stuck is not None
    assert stuck.lease_started_at is None


def test_release_of_a_released_record_is_a_no_op(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """Releasing twice succeeds and writes nothing the second time."""
    (key,) = records.write(firestore_client, [record_fields("e1", state=State.IN_PROGRESS)])
    result = invoke("release", key)
    assert result.exit_code == 0, result.output
    assert "already released, nothing to do" in result.stdout


def test_guarded_writes_never_clobber_a_concurrent_change(
    firestore_client: firestore.Client,
) -> None:
    """A record changed after it was read is reported and keeps the concurrent change.

    The other writes of its batch still apply (the batch is retried one write at a time).
    """
    keys = records.write(
        firestore_client,
        [record_fields(f"e{i}", state=State.IN_PROGRESS, lease="expired") for i in range(3)],
    )
    collection = firestore_client.collection("triggerEvents")
    snapshots = [collection.document(k).get() for k in keys]
    collection.document(keys[1]).update({Field.OWNER: "new-owner"})  # a delivery took it over
    writes = [GuardedWrite(s, {Field.OWNER: None}) for s in snapshots]

    tally = apply_guarded(firestore_client, writes)

    assert (tally.done, tally.changed) == (2, [keys[1]])
    owners = [r.owner for r in map(lambda k: records.read(firestore_client, k), keys) if r]
    assert owners == [None, "new-owner", None]


# --- revive -----------------------------------------------------------------------------------


def test_revive_resets_dead_records_of_one_suffix(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """Dead records of the suffix become in progress, released, attempts 0; others stay."""
    keys = records.write(
        firestore_client,
        [
            record_fields("d1", "a", state=State.DEAD, attempts=10, last_error="boom"),
            record_fields("d2", "b", state=State.DEAD, attempts=10),
            record_fields("f1", "a", state=State.FAILED, attempts=1),
        ],
    )
    untouched = records.raw(firestore_client, keys[1:])
    result = invoke("revive", "--state", "dead", "--suffix", "a", "--yes")
    assert result.exit_code == 0, result.output
    assert "revived 1 record(s)" in result.stdout
    revived = records.read(firestore_client, keys[0])
    assert revived is not None
    assert (revived.state, revived.owner, revived.attempts) == (State.IN_PROGRESS, None, 0)
    assert revived.last_error == "boom"
    assert records.raw(firestore_client, keys[1:]) == untouched


def test_a_revived_dead_event_runs_on_its_next_delivery(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """Revive makes a poison event runnable again, with a full attempt budget."""
    dedup = Deduplicator(
        DedupConfig(max_attempts=3, min_retry_seconds=0, cache_size=0), client=firestore_client
    )
    records.write(firestore_client, [record_fields("e1", state=State.DEAD, attempts=3)])
    runs: list[Delivery] = []
    assert dedup.run("e1", "sendEmail", runs.append).kind is OutcomeKind.DUPLICATE
    assert invoke("revive", "--state", "dead", "--yes").exit_code == 0

    outcome = dedup.run("e1", "sendEmail", runs.append)

    assert outcome.kind is OutcomeKind.RAN
    assert [d.attempt for d in runs] == [1]


def test_a_revived_event_is_protected_by_min_retry_seconds_again(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """It is impossible for a revived event whose receiver is still down to be buried again by
    `max_attempts` fast failures: `revive` starts `firstAttemptAt` anew, so `min_retry_seconds`
    protects it as if it were new. The event died after a long outage (its first attempt an
    hour ago); once revived, five failing deliveries in a row under max_attempts=3 and
    min_retry_seconds=600 each release it for a retry, and none buries it."""
    records.write(
        firestore_client,
        [record_fields("e1", state=State.DEAD, attempts=3, age=HOUR, last_error="down")],
    )
    dedup = Deduplicator(
        DedupConfig(max_attempts=3, min_retry_seconds=600, cache_size=0), client=firestore_client
    )
    revived = invoke("revive", "e1-sendEmail", "--yes")
    assert revived.exit_code == 0, revived.output
    assert "min_retry_seconds again" in revived.stdout

    def receiver_down(delivery: Delivery) -> None:
        raise ConnectionError("the receiver is still down")

    for _ in range(5):
        with pytest.raises(ConnectionError):
            dedup.run("e1", "sendEmail", receiver_down)

    record = records.read(firestore_client, "e1-sendEmail")
    assert record is not None
    assert (record.state, record.attempts, record.has_lease) == (State.IN_PROGRESS, 5, False)
    assert record.first_attempt_at is not None
    assert records.now() - record.first_attempt_at < timedelta(minutes=5)


def test_list_finds_unknown_records_and_revive_runs_them_again(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """An ambiguous delivery skipped on purpose (`on_ambiguous="skip"`) leaves an unknown
    record: `list --state unknown` finds it, later deliveries skip it, and `revive KEY` hands
    it back so that the next delivery runs the handler (not ambiguous: a released lease)."""
    dedup = Deduplicator(
        DedupConfig(max_attempts=3, min_retry_seconds=0, cache_size=0), client=firestore_client
    )
    (key,) = records.write(
        firestore_client,
        [record_fields("e1", state=State.IN_PROGRESS, lease="expired", age=timedelta(minutes=5))],
    )
    runs: list[Delivery] = []
    skipped = dedup.run("e1", "sendEmail", runs.append, on_ambiguous="skip")
    assert (skipped.kind, runs) == (OutcomeKind.AMBIGUOUS, [])

    listed = invoke("list", "--state", "unknown", "--json")
    assert listed.exit_code == 0, listed.output
    assert [r["key"] for r in json.loads(listed.stdout)] == [key]
    assert dedup.run("e1", "sendEmail", runs.append, on_ambiguous="skip").kind is (
        OutcomeKind.DUPLICATE
    )

    revived = invoke("revive", key, "--yes")
    assert revived.exit_code == 0, revived.output
    assert "revived 1 record(s)" in revived.stdout
    outcome = dedup.run("e1", "sendEmail", runs.append, on_ambiguous="skip")
    assert (outcome.kind, [d.attempt for d in runs]) == (OutcomeKind.RAN, [1])


@pytest.mark.parametrize(
    ("state", "lease", "says"),
    [
        (State.SENT, None, "its effect happened"),
        (State.IN_PROGRESS, "live", "see `release`"),
        (State.IN_PROGRESS, None, "waits for a delivery: redeliver the event"),
    ],
)
def test_revive_refuses_a_record_that_is_not_dead_failed_or_unknown(
    invoke: Invoke, firestore_client: firestore.Client, state: State, lease: str | None, says: str
) -> None:
    """A sent or in-progress record named by key is refused, unchanged, with exit status 1;
    so is a missing one. One in progress with no lease (revived or released already, as after
    a revive whose answer was lost) is told to be redelivered, not released."""
    (key,) = records.write(firestore_client, [record_fields("e1", state=state, lease=lease)])
    before = records.raw(firestore_client, [key])
    result = invoke("revive", key, "no-such-key", "--yes")
    assert result.exit_code == 1, result.output
    assert f"cannot revive: state is {state.value}" in result.output
    assert says in result.output
    assert "no-such-key: cannot revive: no such record" in result.output
    assert records.raw(firestore_client, [key]) == before


def test_release_of_a_crashed_last_attempt_runs_the_handler_on_the_next_delivery(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """`release` does what its help says even when the crashed attempt was the last allowed:
    the next delivery runs the handler (one more attempt), it does not bury the event."""
    dedup = Deduplicator(
        DedupConfig(max_attempts=3, min_retry_seconds=0, cache_size=0), client=firestore_client
    )
    (key,) = records.write(
        firestore_client,
        [record_fields("e1", state=State.IN_PROGRESS, lease="expired", attempts=3)],
    )
    assert invoke("release", key, "--yes").exit_code == 0
    runs: list[Delivery] = []

    outcome = dedup.run("e1", "sendEmail", runs.append)

    assert (outcome.kind, [d.attempt for d in runs]) == (OutcomeKind.RAN, [4])
    record = records.read(firestore_client, key)
    assert record is not None
    assert record.state is State.SENT


def test_revive_refused_at_the_prompt_changes_nothing(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """Answering no to the confirmation leaves the failed records as they were."""
    keys = records.write(
        firestore_client, [record_fields(f"f{i}", state=State.FAILED) for i in range(2)]
    )
    before = records.raw(firestore_client, keys)
    result = invoke("revive", "--state", "failed", input="n\n")
    assert result.exit_code == 1
    assert "Revive failed 2 record(s)" in result.stdout
    assert records.raw(firestore_client, keys) == before


def test_revive_with_nothing_to_revive_says_so(invoke: Invoke) -> None:
    """No matching records: a sentence, exit status 0, no prompt."""
    result = invoke("revive", "--state", "dead")
    assert result.exit_code == 0, result.output
    assert "no dead records" in result.stdout


# --- purge ------------------------------------------------------------------------------------


def test_purge_dry_run_changes_nothing(invoke: Invoke, firestore_client: firestore.Client) -> None:
    """--dry-run counts what purge would delete (over several pages) and writes nothing."""
    keys = records.write(
        firestore_client,
        [record_fields(f"old{i}", age=8 * DAY) for i in range(1100)]
        + [record_fields("new", age=HOUR)],
    )
    before = records.raw(firestore_client, keys)
    result = invoke("purge", "--older-than", "7d", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "would delete 1100 record(s)" in result.stdout
    assert records.raw(firestore_client, keys) == before


def test_purge_deletes_5000_old_records_in_batches(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """Purge deletes every old record and no other, sparing live leases, with a progress bar."""
    old = [record_fields(f"old{i}", age=8 * DAY) for i in range(5000)]
    live = [
        record_fields(f"live{i}", state=State.IN_PROGRESS, lease="live", age=8 * DAY)
        for i in range(2)
    ]
    new = [record_fields(f"new{i}", age=6 * DAY) for i in range(10)]
    records.write(firestore_client, old + live + new)

    result = invoke("purge", "--older-than", "7d")

    assert result.exit_code == 0, result.output
    assert "deleted 5000 record(s)" in result.stdout
    assert "spared 2 with a live lease" in result.stdout
    assert "5002/5002" in result.stderr
    assert records.count(firestore_client) == 12


@pytest.mark.parametrize("older_than", ["1h", "23h", "1439m", "86399s"])
def test_purge_refuses_a_cut_off_inside_the_redelivery_window(
    invoke: Invoke, firestore_client: firestore.Client, older_than: str
) -> None:
    """An --older-than shorter than 24 hours deletes nothing, dry run or not, and says why:
    the window, the triggers it belongs to and where the fact is stated."""
    keys = records.write(firestore_client, [record_fields(f"r{i}", age=2 * HOUR) for i in range(3)])
    before = records.raw(firestore_client, keys)
    for extra in ([], ["--dry-run"]):
        result = invoke("purge", "--older-than", older_than, *extra)
        assert result.exit_code == 2, result.output
        assert f"--older-than {older_than} is shorter than" in result.stderr
        assert "24 hours for 2nd gen event functions and Eventarc (docs/platform.md)" in (
            " ".join(result.stderr.split())
        )
        assert "--force" in result.stderr
        assert records.raw(firestore_client, keys) == before


def test_purge_accepts_the_window_itself(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """--older-than 24h (or 1d) is allowed: it spares every record a redelivery may still need."""
    records.write(
        firestore_client,
        [record_fields("old", age=25 * HOUR), record_fields("young", age=23 * HOUR)],
    )
    assert invoke("purge", "--older-than", "1d", "--dry-run").exit_code == 0
    result = invoke("purge", "--older-than", "24h")
    assert result.exit_code == 0, result.output
    assert "deleted 1 record(s)" in result.stdout
    assert records.count(firestore_client) == 1


def test_purge_force_deletes_inside_the_window(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """--force lets the operator cut into the window on purpose; live leases are still spared."""
    records.write(
        firestore_client,
        [
            record_fields("old", age=2 * HOUR),
            record_fields("live", state=State.IN_PROGRESS, lease="live", age=2 * HOUR),
            record_fields("new", age=timedelta(0)),
        ],
    )
    result = invoke("purge", "--older-than", "1h", "--force")
    assert result.exit_code == 0, result.output
    assert "deleted 1 record(s)" in result.stdout
    assert "spared 1 with a live lease" in result.stdout
    assert records.count(firestore_client) == 2


# --- stats ------------------------------------------------------------------------------------


def _stats_records(client: firestore.Client) -> None:
    records.write(
        client,
        [
            record_fields("s1", "a"),
            record_fields("s2", "a"),
            record_fields("d1", "b", state=State.DEAD),
            record_fields("live-new", "a", state=State.IN_PROGRESS, lease="live"),
            record_fields("live-old", "b", state=State.IN_PROGRESS, lease="live", age=HOUR),
            record_fields("stuck-new", "a", state=State.IN_PROGRESS, lease="expired", age=HOUR),
            record_fields("stuck-old", "b", state=State.IN_PROGRESS, lease="expired", age=DAY),
            record_fields("waiting", "b", state=State.IN_PROGRESS),
        ],
    )


def test_stats_json_counts_and_finds_the_oldest_leases(
    invoke: Invoke, firestore_client: firestore.Client
) -> None:
    """Counts by suffix and state, lease counts, the oldest live lease and stuck record."""
    _stats_records(firestore_client)
    result = invoke("stats", "--json")
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    assert stats["counts"] == {
        "a": {"in_progress": 2, "sent": 2, "failed": 0, "dead": 0, "unknown": 0},
        "b": {"in_progress": 3, "sent": 0, "failed": 0, "dead": 1, "unknown": 0},
    }
    assert stats["totals"] == {"in_progress": 5, "sent": 2, "failed": 0, "dead": 1, "unknown": 0}
    assert stats["inProgress"] == {"live": 2, "expired": 2, "released": 1}
    assert stats["oldestStuck"]["key"] == "stuck-old-b"
    assert stats["oldestLiveLease"]["leaseStatus"] == "live"


def test_stats_table_is_readable(invoke: Invoke, firestore_client: firestore.Client) -> None:
    """The default output is a table and one line per lease finding."""
    _stats_records(firestore_client)
    result = invoke("stats")
    assert result.exit_code == 0, result.output
    assert "2 live lease(s), 2 stuck past their lease, 1 released" in result.stdout
    assert "oldest stuck: triggerEvents/stuck-old-b" in result.stdout


def test_stats_of_an_empty_collection(invoke: Invoke) -> None:
    """No records: zero totals, no oldest anything."""
    stats = json.loads(invoke("stats", "--json").stdout)
    assert stats["counts"] == {}
    assert stats["oldestLiveLease"] is None
    assert stats["oldestStuck"] is None


# --- global options and bad input -------------------------------------------------------------


def test_collection_option_and_variable_pick_the_collection(
    invoke: Invoke, firestore_client: firestore.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--collection, else DEDUP_COLLECTION, names the dedup collection."""
    records.write(firestore_client, [record_fields("e1")], collection="apps/one/dedup")
    assert invoke("list", "--json").stdout.strip() == "[]"
    by_option = invoke("--collection", "apps/one/dedup", "show", "e1", "sendEmail")
    assert by_option.exit_code == 0, by_option.output
    monkeypatch.setenv("DEDUP_COLLECTION", "apps/one/dedup")
    assert json.loads(invoke("list", "--json").stdout)[0]["path"] == "apps/one/dedup/e1-sendEmail"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["list", "--state", "sleeping"], "'sleeping' is not one of"),
        (["list", "--older-than", "10x"], "'10x' is not a duration: use a positive whole number"),
        (["purge", "--older-than", "0d"], "'0d' is not a duration"),
        (["purge"], "Missing option '--older-than'"),
        (["revive", "--state", "sent"], "'sent' is not one of 'dead', 'failed'"),
        (["list", "--suffix", "no spaces"], "suffix 'no spaces' is invalid"),
        (["show", "a/b"], "'a/b' is not a record key"),
        (["--collection", "a/b", "list"], "must be a collection path"),
        (["list", "--limit", "0"], "0 is not in the range x>=1"),
    ],
)
def test_bad_input_is_one_error_line_and_status_2(
    invoke: Invoke, args: list[str], message: str
) -> None:
    """Bad input: a usage error naming the fix on stderr, exit status 2, no traceback."""
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(error_lines) == 1
    assert message in error_lines[0]
    assert "Traceback" not in result.output


@pytest.mark.parametrize("emulator", [None, os.environ.get("FIRESTORE_EMULATOR_HOST")])
def test_missing_project_is_a_usage_error(emulator: str | None) -> None:
    """No --project and no project variable: exit status 2 and how to name the project."""
    env = {
        "GOOGLE_CLOUD_PROJECT": None,
        "GCLOUD_PROJECT": None,
        "FIRESTORE_EMULATOR_HOST": emulator,
    }
    result = CliRunner(env=env).invoke(cli, ["stats"])
    assert result.exit_code == 2
    assert "no Google Cloud project" in result.stderr
    assert "--project PROJECT or set GOOGLE_CLOUD_PROJECT" in result.stderr


def test_unreachable_emulator_fails_fast(invoke: Invoke) -> None:
    """An emulator variable pointing nowhere is reported at once, not after minutes of retries."""
    result = CliRunner(env={"FIRESTORE_EMULATOR_HOST": "127.0.0.1:9"}).invoke(
        cli, ["--project", "demo-x", "list"]
    )
    assert result.exit_code == 1
    assert "no Firestore emulator answers at 127.0.0.1:9" in result.stderr


def test_python_dash_m_dedup_runs_the_cli(firestore_client: firestore.Client) -> None:
    """`python -m dedup` is the same command line."""
    records.write(firestore_client, [record_fields("e1")])
    completed = subprocess.run(
        [sys.executable, "-m", "dedup", "--project", firestore_client.project, "list", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert json.loads(completed.stdout)[0]["key"] == "e1-sendEmail"
