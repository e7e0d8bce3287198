"""`dedup list`: records newest first, filtered by state, suffix and age."""

from __future__ import annotations

from datetime import timedelta

import click
from google.cloud import firestore

from dedup.cli.options import DURATION, SUFFIX, json_option
from dedup.cli.queries import filtered, records_of
from dedup.cli.render import console, echo_json, record_json, records_table
from dedup.cli.target import Target
from dedup.record import Field, State

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
