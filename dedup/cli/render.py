"""Presenting records: times relative to the database clock, lease phrases, tables and JSON."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dedup.cli.durations import format_duration
from dedup.cli.leases import LeaseStatus, lease_status
from dedup.record import Field, Record


def iso(moment: datetime | None) -> str | None:
    """`moment` in ISO 8601, or None."""
    return None if moment is None else moment.isoformat()


def relative(moment: datetime | None, now: datetime) -> str:
    """`2024-05-01 10:00:00Z (3m ago)`, or `-` for no time."""
    if moment is None:
        return "-"
    stamp = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    if moment <= now:
        return f"{stamp} ({format_duration(now - moment)} ago)"
    return f"{stamp} (in {format_duration(moment - now)})"


def age(moment: datetime | None, now: datetime) -> str:
    """How long before `now` the moment was (`5m 2s`), or `-` for no time."""
    return "-" if moment is None else format_duration(now - moment)


def describe_lease(record: Record, now: datetime) -> str:
    """One phrase for the operator: whose lease, until when, and what happens next."""
    status = lease_status(record, now)
    expires = record.lease_expires_at
    if status is LeaseStatus.LIVE and expires is not None:
        return f"live, owner {record.owner}, expires in {format_duration(expires - now)}"
    if status is LeaseStatus.EXPIRED and expires is not None:
        return f"expired {format_duration(now - expires)} ago (stuck until a redelivery)"
    if status is LeaseStatus.RELEASED:
        return "released: the next delivery runs the handler"
    return "none (final state)"


def record_json(record: Record, path: str, now: datetime) -> dict[str, Any]:
    """The record as JSON: schema field names, ISO 8601 times, plus the lease at `now`."""
    return {
        "key": record.key,
        "path": path,
        Field.EVENT_ID: record.event_id,
        Field.SUFFIX: record.suffix,
        Field.STATE: record.state.value,
        Field.SENT: record.sent,
        Field.OWNER: record.owner,
        Field.LEASE_STARTED_AT: iso(record.lease_started_at),
        Field.LEASE_SECONDS: record.lease_seconds,
        Field.ATTEMPTS: record.attempts,
        Field.FIRST_ATTEMPT_AT: iso(record.first_attempt_at),
        Field.LAST_ATTEMPT_AT: iso(record.last_attempt_at),
        Field.SENT_AT: iso(record.sent_at),
        Field.EXPIRE_AT: iso(record.expire_at),
        Field.LAST_ERROR: record.last_error,
        Field.PAYLOAD_HASH: record.payload_hash,
        Field.MODE: record.mode.value,
        Field.SUBJECT: record.subject,
        Field.RESULT: record.result,
        Field.TRACE_ID: record.trace_id,
        Field.RECONCILED: record.reconciled,
        Field.NOTES: record.notes,
        "leaseExpiresAt": iso(record.lease_expires_at),
        "leaseStatus": lease_status(record, now).value,
        "readTime": iso(now),
    }


def echo_json(value: Any) -> None:
    """Print `value` as indented JSON on standard output."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


PIPED_WIDTH = 1000
"""The width of a table written to a pipe or a file (COLUMNS unset): wide enough that no
key is cut, as a script reading the output needs whole keys."""


def console(*, stderr: bool = False) -> Console:
    """A rich console on click's current stream; markup off, as keys may contain brackets.

    On a terminal, the terminal's width; piped (and COLUMNS unset), `PIPED_WIDTH`, so keys
    stay whole (tables are as wide as their content, never padded to the width)."""
    shown = Console(stderr=stderr, markup=False, emoji=False, highlight=False)
    if not shown.is_terminal and "COLUMNS" not in os.environ:
        shown.width = PIPED_WIDTH
    return shown


def cell(value: object) -> Text:
    """A table cell: the value as plain text, `-` for None."""
    return Text("-" if value is None else str(value))


def records_table(records: Sequence[Record], now: datetime, *, title: str) -> Table:
    """One row per record: key, state, attempts, age of the first attempt, lease, last error.

    Keys are never wrapped (an operator copies them into `show` and `release`): the other
    columns fold to make room."""
    table = Table(title=title, title_justify="left")
    widest = max((len(record.key) for record in records), default=3)
    table.add_column("key", no_wrap=True, min_width=widest)
    for column in ("state", "attempts", "first attempt", "lease", "last error"):
        table.add_column(column, overflow="fold")
    for record in records:
        table.add_row(
            cell(record.key),
            cell(record.state.value),
            cell(record.attempts),
            cell(f"{age(record.first_attempt_at, now)} ago"),
            cell(lease_status(record, now).value),
            cell(_clip(record.last_error)),
        )
    return table


def _clip(text: str | None, width: int = 60) -> str | None:
    if text is None or len(text) <= width:
        return text
    return text[: width - 1] + "…"


def record_grid(record: Record, path: str, now: datetime) -> Table:
    """Every field of one record, a line each, times relative to `now`."""
    rows: list[tuple[str, object]] = [
        ("path", path),
        (Field.STATE, record.state.value),
        ("lease", describe_lease(record, now)),
        (Field.EVENT_ID, record.event_id),
        (Field.SUFFIX, record.suffix),
        (Field.MODE, record.mode.value),
        (Field.SUBJECT, record.subject),
        (Field.ATTEMPTS, record.attempts),
        (Field.SENT, record.sent),
        (Field.OWNER, record.owner),
        (Field.LEASE_STARTED_AT, relative(record.lease_started_at, now)),
        (Field.LEASE_SECONDS, record.lease_seconds),
        (Field.FIRST_ATTEMPT_AT, relative(record.first_attempt_at, now)),
        (Field.LAST_ATTEMPT_AT, relative(record.last_attempt_at, now)),
        (Field.SENT_AT, relative(record.sent_at, now)),
        (Field.EXPIRE_AT, relative(record.expire_at, now)),
        (Field.PAYLOAD_HASH, record.payload_hash),
        (Field.LAST_ERROR, record.last_error),
        (Field.TRACE_ID, record.trace_id),
        (Field.RECONCILED, record.reconciled),
        (Field.NOTES, record.notes),
    ]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for name, value in rows:
        grid.add_row(cell(name), cell(value))
    return grid
