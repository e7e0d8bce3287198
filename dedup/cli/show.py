"""`dedup show`: one record, readable or as JSON."""

from __future__ import annotations

import click

from dedup.cli.options import SUFFIX, json_option
from dedup.cli.render import console, echo_json, record_grid, record_json
from dedup.cli.target import Target
from dedup.errors import InvalidSuffix, MissingEventId
from dedup.keys import KeyLayout, dedup_key
from dedup.record import Record


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
