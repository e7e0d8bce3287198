"""`dedup purge`: delete records first attempted long ago, for projects without a TTL policy."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import click
from google.cloud import firestore
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dedup.cli.guarded import BATCH_LIMIT, GuardedWrite, WriteTally, apply_guarded
from dedup.cli.options import DURATION
from dedup.cli.queries import count
from dedup.cli.render import console, relative
from dedup.cli.target import Target
from dedup.cli.window import require_outside_window
from dedup.record import Field, Record

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
    help="Allow an --older-than shorter than the triggers' redelivery window.",
)
@click.pass_obj
def purge(target: Target, older_than: timedelta, dry_run: bool, force: bool) -> None:
    """Delete records first attempted before a duration ago (no TTL).

    For projects without a TTL policy on expireAt. Deletes in batches of 500, sparing
    records whose lease is still live. Refuses an --older-than shorter than the longest
    redelivery window of the triggers (docs/platform.md) unless --force: a redelivery that
    finds no record runs the handler again.
    """
    require_outside_window(older_than, force=force, option="--older-than")
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
