"""The commands that change records: `dedup release` and `dedup revive` hand records back so the
next delivery runs the handler; `dedup purge` deletes old ones.

Invariant of `purge`: unless `--force`, it deletes no record a later delivery may still need.
That is never one inside the platform's redelivery window (sourced in docs/platform.md;
`require_outside_window`), and, where the project has dead-letter subscriptions, never one
inside that window plus their retention (`require_dead_letters_kept`; both in
`dedup.cli.purge_window`): a redrive of a dead letter whose record was purged runs the handler
again. Both refusals happen before anything is read or deleted, and name the `--older-than`
that passes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

import click
from google.cloud import firestore
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dedup.cli.guarded import BATCH_LIMIT, GuardedWrite, WriteTally, apply_guarded
from dedup.cli.purge_window import (
    NoDeadLetters,
    RetentionType,
    require_dead_letters_kept,
    require_outside_window,
)
from dedup.cli.render import (
    DURATION,
    SUFFIX,
    LeaseStatus,
    console,
    lease_status,
    records_table,
    relative,
    yes_option,
)
from dedup.cli.target import Target, count, filtered, records_of
from dedup.kernel.record import Field, Record, State
from dedup.kernel.transitions import operator_released, revived

REVIVABLE_STATES = (State.DEAD.value, State.FAILED.value, State.UNKNOWN.value)
"""States `revive` hands back: final states other than sent. Failed, and dead after a handler
that raised: the effect never happened; unknown: nobody could tell whether it did, and the
function skips such events. A dead record marked `ambiguous` (buried after its last allowed
attempt's lease expired: that attempt may have produced the effect) is refused without
`--force` (`possibly_effected`)."""


def possibly_effected(record: Record) -> bool:
    """A dead record whose effect may have happened: its last allowed attempt's lease expired
    (the process died, maybe after the effect) and the record was buried `ambiguous`
    (`dedup.kernel.transitions.mark_dead`). `revive` hands it back only with `--force`."""
    return record.state is State.DEAD and record.ambiguous


# --- release ----------------------------------------------------------------------------------


@click.command()
@click.argument("keys", nargs=-1, required=True, metavar="KEY...")
@yes_option
@click.pass_obj
def release(target: Target, keys: tuple[str, ...], yes: bool) -> None:
    """Hand in-progress leases back, as if they had expired now.

    For a record whose handler crashed under a long lease. The next delivery takes the lease
    over as an ambiguous one (the crashed handler may have produced the effect): it asks
    `reconcile`, then follows `on_ambiguous` (rerun: the handler runs; skip: `unknown`).
    Releasing a live lease of a handler that is still running lets a redelivery run it a second
    time: check `show` first. Exits with status 1 if a key is missing or not in progress.
    """
    snapshots = [target.document(key).get() for key in dict.fromkeys(keys)]
    now = target.database_now()
    writes: list[GuardedWrite] = []
    problems = 0
    for snapshot in snapshots:
        record = Record.from_snapshot(snapshot)
        problem = _release_problem(record)
        if record is None or problem is not None:
            problems += 1
            click.echo(f"{target.path(snapshot.id)}: cannot release: {problem}")
        elif lease_status(record, now) is LeaseStatus.RELEASED:
            click.echo(f"{target.path(snapshot.id)}: already released, nothing to do")
        else:
            writes.append(GuardedWrite(snapshot, operator_released()))
    if writes:
        _confirm_writes(target, writes, now, "Release the lease of", yes)
        tally = apply_guarded(target.client, writes)
        _report(target, tally, "released")
        problems += len(tally.changed)
    if problems:
        raise click.ClickException(f"{problems} of {len(snapshots)} record(s) were not released")


def _release_problem(record: Record | None) -> str | None:
    """Why `record` cannot be released (missing, or not in progress), or None."""
    if record is None:
        return "no such record (check the key with `dedup list`)"
    if record.state is not State.IN_PROGRESS:
        hint = " (use `dedup revive`)" if record.state.value in REVIVABLE_STATES else ""
        return f"state is {record.state.value}, not in_progress{hint}"
    return None


# --- revive -----------------------------------------------------------------------------------


@click.command()
@click.argument("keys", nargs=-1, metavar="[KEY...]")
@click.option("--state", type=click.Choice(REVIVABLE_STATES), help="Every record in this state.")
@click.option("--suffix", type=SUFFIX, help="With --state: only this function's records.")
@click.option(
    "--force",
    is_flag=True,
    help="Also revive dead records whose last attempt may have produced the effect (`ambiguous`): "
    "only once you know it did not happen, or that a second one is acceptable.",
)
@yes_option
@click.pass_obj
def revive(
    target: Target,
    keys: tuple[str, ...],
    state: str | None,
    suffix: str | None,
    force: bool,
    yes: bool,
) -> None:
    """Make dead, failed or unknown records runnable again, as if new (attempts reset to 0).

    Name the records by KEY, or all of one state with --state (and --suffix). Each becomes
    in_progress and released: the next delivery of the event runs its handler with a full
    `max_attempts` budget, and `firstAttemptAt` starts anew (at the revive, then at that
    delivery's attempt), so `min_retry_seconds` protects it again: fast failures do not bury it
    before that long (`lastError` and `notes` are kept). A released record is never
    ambiguous, so an unknown record's handler runs even under on_ambiguous="skip": revive one
    only once you know its effect did not happen, or that a second one is acceptable. The same
    holds for a dead record marked `ambiguous` (its last allowed attempt's lease expired, maybe
    after the effect): it is refused (exit status 1) unless --force.

    Revive delivers nothing: the platform stopped retrying when the record became final, and
    instances that saw it sent may skip it from their cache; see the README runbook. A KEY
    whose record is missing or not dead, failed or unknown (sent: its effect happened;
    in_progress: a delivery owns it, use `release`; or, with no lease, it waits for a
    delivery) is refused: exit status 1.
    """
    if bool(keys) == (state is not None):
        raise click.UsageError("name the records by KEY or by --state, not both nor neither")
    if suffix is not None and keys:
        raise click.UsageError("--suffix goes with --state")
    now = target.database_now()
    problems = 0
    if keys:
        found = [target.document(key).get() for key in dict.fromkeys(keys)]
        what = "revivable"
    else:
        assert state is not None
        found = [s for s in filtered(target.records, state, suffix).stream() if s.exists]
        what = state
    snapshots = []
    for snapshot in found:
        problem = _revive_problem(Record.from_snapshot(snapshot), force=force)
        if problem is None:
            snapshots.append(snapshot)
        else:
            problems += 1
            click.echo(f"{target.path(snapshot.id)}: cannot revive: {problem}")
    if not snapshots and not problems:
        click.echo(f"no {what} records" + (f" with suffix {suffix}" if suffix else ""))
        return
    if snapshots:
        writes = [GuardedWrite(s, revived()) for s in snapshots]
        _confirm_writes(target, writes, now, f"Revive {what}", yes)
        tally = apply_guarded(target.client, writes)
        _report(target, tally, "revived")
        if tally.done:
            click.echo(
                "attempts reset to 0 and firstAttemptAt to now: each revived event has its full "
                "max_attempts and min_retry_seconds again, from its next delivery"
            )
        problems += len(tally.changed)
    if problems:
        raise click.ClickException(f"{problems} record(s) were not revived")


def _revive_problem(record: Record | None, *, force: bool = False) -> str | None:
    """Why `record` cannot be revived (missing, sent or in progress; dead but possibly
    effected, unless `force`), or None."""
    if record is None:
        return "no such record (check the key with `dedup list`)"
    if possibly_effected(record) and not force:
        return (
            "state is dead, ambiguous: its last allowed attempt's lease expired, so that attempt "
            "may have produced the effect. Check the receiver for the effect under the key "
            f"{record.key} (`dedup show` says what to check); if it did not happen, or a second "
            "one is acceptable, run revive again with --force"
        )
    if record.state.value in REVIVABLE_STATES:
        return None
    if record.state is State.SENT:
        return "state is sent: its effect happened, there is nothing to run again"
    if not record.has_lease:  # revived or released already (maybe by a revive gone unanswered)
        return (
            "state is in_progress with no lease: it was revived or released and waits for a "
            "delivery: redeliver the event (revive delivers nothing)"
        )
    return "state is in_progress, not dead, failed or unknown (a delivery owns it: see `release`)"


# --- shared by both ---------------------------------------------------------------------------


def _confirm_writes(
    target: Target, writes: Sequence[GuardedWrite], now: datetime, action: str, yes: bool
) -> None:
    """Show the records about to change and ask (unless `yes`); aborts on refusal."""
    records = records_of(w.snapshot for w in writes)
    console().print(records_table(records, now, title=f"{len(records)} record(s)"))
    live = sum(lease_status(r, now) is LeaseStatus.LIVE for r in records)
    if live:
        click.echo(f"warning: {live} lease(s) still live: their handlers may be running")
    if not yes:
        click.confirm(f"{action} {len(records)} record(s) in {target.collection}?", abort=True)


def _report(target: Target, tally: WriteTally, verb: str) -> None:
    click.echo(f"{verb} {tally.done} record(s)")
    for key in tally.changed:
        click.echo(f"{target.path(key)}: changed since read, left alone (look again with `show`)")


_PURGE_FIELDS = [
    Field.STATE,
    Field.OWNER,
    Field.LEASE_STARTED_AT,
    Field.LEASE_SECONDS,
    Field.FIRST_ATTEMPT_AT,
]
"""What purge reads of each record: enough to spare live leases and to page by first attempt."""


@click.command()
@click.option(
    "--older-than",
    type=DURATION,
    required=True,
    metavar="DURATION",
    help="Delete records first attempted before now - this, e.g. 7d.",
)
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; change nothing.")
@click.option(
    "--force",
    is_flag=True,
    help="Allow an --older-than shorter than the triggers' redelivery window (plus the "
    "dead-letter retention).",
)
@click.option(
    "--dead-letter-retention",
    type=RetentionType(),
    metavar="DURATION|none",
    help="How long the project's dead-letter subscriptions keep a message, or none when it "
    "has none. [default: asked of Pub/Sub]",
)
@click.pass_obj
def purge(
    target: Target,
    older_than: timedelta,
    dry_run: bool,
    force: bool,
    dead_letter_retention: timedelta | NoDeadLetters | None,
) -> None:
    """Delete records first attempted before a duration ago (no TTL).

    For projects without a TTL policy on expireAt. Deletes in batches of 500, sparing
    records whose lease is still live. Refuses, unless --force, an --older-than shorter than
    the longest redelivery window of the triggers (docs/platform.md), and, where the project
    has dead-letter subscriptions (the Cloud Run path's <service>-dead-letter), shorter than
    that window plus their message retention: a redelivery or a redrive that finds no record
    runs the handler again. The dead-letter subscriptions are listed from Pub/Sub (the
    emulator with PUBSUB_EMULATOR_HOST; none with only the Firestore emulator);
    --dead-letter-retention says it instead.
    """
    require_outside_window(older_than, force=force, option="--older-than")
    if not force:
        require_dead_letters_kept(target.project, older_than, dead_letter_retention)
    now = target.database_now()
    cutoff = now - older_than
    query = target.records.where(filter=firestore.FieldFilter(Field.FIRST_ATTEMPT_AT, "<", cutoff))
    total = count(query)
    tally, spared = WriteTally(), 0
    with _progress() as progress:
        task = progress.add_task("checking" if dry_run else "deleting", total=total)
        for page in _pages(query.order_by(Field.FIRST_ATTEMPT_AT).select(_PURGE_FIELDS)):
            doomed = [s for s in page if not _live(s, now)]
            spared += len(page) - len(doomed)
            progress.advance(task, len(page) - len(doomed))
            if dry_run:
                tally.done += len(doomed)
                progress.advance(task, len(doomed))
            else:
                deletes = [GuardedWrite(s, None) for s in doomed]
                step = apply_guarded(target.client, deletes, lambda n: progress.advance(task, n))
                tally.done += step.done
                tally.changed += step.changed
    verb = "would delete" if dry_run else "deleted"
    click.echo(
        f"{verb} {tally.done} record(s) first attempted before {relative(cutoff, now)}; "
        f"spared {spared} with a live lease, {len(tally.changed)} changed since read"
    )


def _live(snapshot: firestore.DocumentSnapshot[Any], now: datetime) -> bool:
    record = Record.from_snapshot(snapshot)
    return record is not None and record.lease_live(now)


def _pages(query: Any, size: int = BATCH_LIMIT) -> Iterator[list[firestore.DocumentSnapshot[Any]]]:
    """`query` (ordered) in pages of `size`, each starting after the last one read."""
    page = list(query.limit(size).stream())
    while page:
        yield page
        if len(page) < size:
            return
        page = list(query.start_after(page[-1]).limit(size).stream())


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console(stderr=True),
    )
