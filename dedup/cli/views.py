"""The commands that read records: `dedup show`, `dedup list` and `dedup stats`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import click
from google.cloud import firestore
from rich.table import Table

from dedup.cli.render import (
    DURATION,
    SUFFIX,
    LeaseStatus,
    age,
    cell,
    console,
    describe_lease,
    echo_json,
    is_stuck,
    iso,
    json_option,
    lease_status,
    record_grid,
    record_json,
    records_table,
)
from dedup.cli.target import Target, count, filtered, records_of
from dedup.errors import InvalidSuffix, MissingEventId
from dedup.kernel.record import Field, Record, State
from dedup.kernel.transitions import KeyLayout, dedup_key


@click.command()
@click.argument("key_or_event_id", metavar="EVENT_ID SUFFIX | KEY")
@click.argument("suffix", required=False, type=SUFFIX, metavar="")
@json_option
@click.pass_obj
def show(target: Target, key_or_event_id: str, suffix: str | None, as_json: bool) -> None:
    """Show one record, by EVENT_ID SUFFIX or by KEY (`<eventId>-<suffix>`)."""
    key = _key(key_or_event_id, suffix, target.key_layout)
    snapshot = target.document(key).get()
    record = Record.from_snapshot(snapshot)
    if record is None:
        raise click.ClickException(
            f"no record {target.path(key)}: check the event id and suffix (or the key), "
            "or find it with `dedup list --suffix SUFFIX`"
        )
    now = snapshot.read_time or target.database_now()
    if as_json:
        echo_json(record_json(record, target.path(key), now))
        return
    console().print(record_grid(record, target.path(key), now))


def _key(key_or_event_id: str, suffix: str | None, layout: KeyLayout) -> str:
    if suffix is None:
        return key_or_event_id
    try:
        return dedup_key(key_or_event_id, suffix, layout)
    except (MissingEventId, InvalidSuffix) as exc:
        raise click.BadParameter(str(exc)) from exc


DEFAULT_LIST_LIMIT = 50
"""Rows `list` shows unless `--limit` says otherwise."""


@click.command(name="list")
@click.option("--state", type=click.Choice([s.value for s in State]), help="Only this state.")
@click.option("--suffix", type=SUFFIX, help="Only this function's records.")
@click.option(
    "--subject",
    metavar="PATH",
    help="Only records of events about this document (e.g. users/alice).",
)
@click.option(
    "--older-than", type=DURATION, metavar="DURATION", help="First attempted before now - this."
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=DEFAULT_LIST_LIMIT,
    show_default=True,
    help="Most rows.",
)
@json_option
@click.pass_obj
def list_command(
    target: Target,
    state: str | None,
    suffix: str | None,
    subject: str | None,
    older_than: timedelta | None,
    limit: int,
    as_json: bool,
) -> None:
    """List records, newest first (by firstAttemptAt).

    With --state, --suffix or --subject, Firestore needs a composite index (that field, then
    firstAttemptAt descending; firestore.indexes.json declares them); the error message links
    to its creation when it is missing. --subject answers "what happened to this document":
    records keep the document path of the Firestore event that created them.
    """
    now = target.database_now()
    query = filtered(target.records, state, suffix, subject)
    if older_than is not None:
        query = query.where(
            filter=firestore.FieldFilter(Field.FIRST_ATTEMPT_AT, "<", now - older_than)
        )
    query = query.order_by(Field.FIRST_ATTEMPT_AT, direction=firestore.Query.DESCENDING)
    records = records_of(query.limit(limit).stream())
    if as_json:
        echo_json([record_json(r, target.path(r.key), now) for r in records])
        return
    if not records:
        click.echo(f"no records in {target.collection} match")
        return
    more = f"; more may exist, raise --limit ({limit})" if len(records) == limit else ""
    title = f"{len(records)} record(s) in {target.collection}, newest first{more}"
    console().print(records_table(records, now, title=title))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Stats:
    """Counts of records by suffix and state, and the in-progress records' leases."""

    now: datetime
    counts: dict[str, dict[str, int]]
    """suffix -> state -> count."""
    in_progress: list[Record]

    def lease_counts(self) -> dict[str, int]:
        """In-progress records by lease status (live, expired = stuck, released)."""
        counts = {s.value: 0 for s in (LeaseStatus.LIVE, LeaseStatus.EXPIRED, LeaseStatus.RELEASED)}
        for record in self.in_progress:
            counts[lease_status(record, self.now).value] += 1
        return counts

    def oldest_live_lease(self) -> Record | None:
        """The live lease started longest ago (a handler running long, or a lease too long)."""
        live = [r for r in self.in_progress if lease_status(r, self.now) is LeaseStatus.LIVE]
        return min(live, key=lambda r: r.lease_started_at or _EPOCH, default=None)

    def oldest_stuck(self) -> Record | None:
        """The in-progress record past its lease with the earliest first attempt."""
        stuck = [r for r in self.in_progress if is_stuck(r, self.now)]
        return min(stuck, key=lambda r: r.first_attempt_at or _EPOCH, default=None)


@click.command()
@json_option
@click.pass_obj
def stats(target: Target, as_json: bool) -> None:
    """Counts by suffix and state, oldest live lease, oldest stuck record.

    Counts are server-side aggregations; only in-progress records are read.
    """
    now = target.database_now()
    counts = {
        suffix: {s.value: count(filtered(target.records, s.value, suffix)) for s in State}
        for suffix in _suffixes(target.records)
    }
    in_progress = records_of(filtered(target.records, State.IN_PROGRESS.value, None).stream())
    result = Stats(now=now, counts=counts, in_progress=in_progress)
    if as_json:
        echo_json(_stats_json(target, result))
        return
    _print_stats(target, result)


def _suffixes(records: firestore.CollectionReference) -> list[str]:
    """Distinct suffixes, one indexed query each (a skip scan; reads one document per suffix)."""
    query = records.order_by(Field.SUFFIX).select([Field.SUFFIX]).limit(1)
    found: list[str] = []
    while True:
        page = query
        if found:
            page = query.where(filter=firestore.FieldFilter(Field.SUFFIX, ">", found[-1]))
        first = next(iter(page.stream()), None)
        if first is None:
            return found
        found.append(str(first.get(Field.SUFFIX)))


def _stats_json(target: Target, result: Stats) -> dict[str, Any]:
    def one(record: Record | None) -> dict[str, Any] | None:
        return None if record is None else record_json(record, target.path(record.key), result.now)

    totals = {s.value: sum(c[s.value] for c in result.counts.values()) for s in State}
    return {
        "collection": target.collection,
        "readTime": iso(result.now),
        "counts": result.counts,
        "totals": totals,
        "inProgress": result.lease_counts(),
        "oldestLiveLease": one(result.oldest_live_lease()),
        "oldestStuck": one(result.oldest_stuck()),
    }


def _print_stats(target: Target, result: Stats) -> None:
    table = Table(title=f"records in {target.collection}", title_justify="left")
    table.add_column("suffix")
    for state in State:
        table.add_column(state.value, justify="right")
    table.add_column("total", justify="right")
    for suffix, by_state in sorted(result.counts.items()):
        table.add_row(
            cell(suffix), *(cell(by_state[s.value]) for s in State), cell(sum(by_state.values()))
        )
    totals = [sum(c[s.value] for c in result.counts.values()) for s in State]
    table.add_row(cell("all"), *map(cell, totals), cell(sum(totals)), style="bold")
    screen = console()
    screen.print(table)
    leases = result.lease_counts()
    screen.print(
        f"in progress: {leases['live']} live lease(s), {leases['expired']} stuck past their "
        f"lease, {leases['released']} released (waiting for a redelivery)"
    )
    live, stuck = result.oldest_live_lease(), result.oldest_stuck()
    if live is not None:
        screen.print(
            f"oldest live lease: {target.path(live.key)}, started "
            f"{age(live.lease_started_at, result.now)} ago, {describe_lease(live, result.now)}"
        )
    if stuck is not None:
        screen.print(
            f"oldest stuck: {target.path(stuck.key)}, first attempt "
            f"{age(stuck.first_attempt_at, result.now)} ago, {stuck.attempts} attempt(s), "
            f"lease {describe_lease(stuck, result.now)}"
        )
