"""What the operator types and reads: durations, lease phrases, shared options, tables and JSON.

Times are shown relative to the database's clock (a read time of Firestore), never the local one.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dedup.errors import InvalidSuffix
from dedup.kernel.record import Field, Record, State
from dedup.kernel.transitions import validate_suffix

_DURATION = re.compile(r"(?P<amount>\d+)(?P<unit>[smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """`30s`, `10m`, `2h`, `7d` as a timedelta; raises ValueError (saying the form) otherwise."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or int(match["amount"]) == 0:
        raise ValueError(
            f"{text!r} is not a duration: use a positive whole number and a unit, "
            "s, m, h or d (e.g. 30s, 10m, 2h, 7d)"
        )
    return timedelta(seconds=int(match["amount"]) * _UNIT_SECONDS[match["unit"]])


def format_duration(span: timedelta) -> str:
    """The span in its two largest units: `42s`, `5m 2s`, `3h 0m`, `2d 4h` (negative: `0s`)."""
    seconds = max(0, int(span.total_seconds()))
    for big, small in (("d", "h"), ("h", "m"), ("m", "s")):
        amount, rest = divmod(seconds, _UNIT_SECONDS[big])
        if amount:
            return f"{amount}{big} {rest // _UNIT_SECONDS[small]}{small}"
    return f"{seconds}s"


def format_exact(span: timedelta) -> str:
    """The span in the largest unit that holds it whole, as typed: `24h`, `90m`, `7d`, `45s`."""
    seconds = int(span.total_seconds())
    for unit in ("d", "h", "m"):
        if seconds and seconds % _UNIT_SECONDS[unit] == 0:
            return f"{seconds // _UNIT_SECONDS[unit]}{unit}"
    return f"{seconds}s"


class LeaseStatus(StrEnum):
    """A record's lease as seen at a database read time."""

    LIVE = "live"
    """A delivery holds the lease and it has not expired: a handler may be running."""
    EXPIRED = "expired"
    """The lease expired: its owner is presumed dead; the next delivery takes it over."""
    RELEASED = "released"
    """In progress with no lease: the next delivery runs the handler."""
    NONE = "none"
    """A final record (sent, failed, dead, unknown): no lease."""


def lease_status(record: Record, now: datetime) -> LeaseStatus:
    """The lease of `record` at `now` (a database read time)."""
    if record.lease_live(now):
        return LeaseStatus.LIVE
    if record.has_lease:
        return LeaseStatus.EXPIRED
    return LeaseStatus.RELEASED if record.state is State.IN_PROGRESS else LeaseStatus.NONE


def is_stuck(record: Record, now: datetime) -> bool:
    """In progress with an expired lease: only a redelivery (or `release`) moves it on."""
    return record.state is State.IN_PROGRESS and lease_status(record, now) is LeaseStatus.EXPIRED


class DurationType(click.ParamType[timedelta, Any]):
    """A click parameter holding a duration such as `10m`, converted to a timedelta."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> timedelta:
        """Parse `value`, or fail with the accepted form."""
        if isinstance(value, timedelta):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class SuffixType(click.ParamType[str, Any]):
    """A click parameter holding a function suffix, validated like `trigger_once` does."""

    name = "suffix"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """Return the suffix, or fail with the naming rule."""
        try:
            return validate_suffix(str(value))
        except InvalidSuffix as exc:
            self.fail(str(exc), param, ctx)


DURATION = DurationType()
SUFFIX = SuffixType()


def json_option[F: Callable[..., Any]](command: F) -> F:
    """`--json` (as `as_json`): print JSON for scripts."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(command)


def yes_option[F: Callable[..., Any]](command: F) -> F:
    """`--yes`/`-y`: do not ask for confirmation."""
    return click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")(command)


def source_and_check(stale: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The `SOURCE_DIR` argument (an existing folder, as `source`, a `Path`) and `--check` (as
    `check`): write nothing, exit 1 when `stale` says (`dedup manifest`, `dedup vendor`)."""

    def add(command: Callable[..., Any]) -> Callable[..., Any]:
        checked = click.option("--check", is_flag=True, help=f"Write nothing; exit 1 {stale}.")
        folder = click.Path(exists=True, file_okay=False, path_type=Path)
        return click.argument("source", type=folder, metavar="SOURCE_DIR")(checked(command))

    return add


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
    if status is LeaseStatus.RELEASED and record.ambiguous:
        return (
            "released, ambiguous (its owner may have run the handler): the next delivery asks "
            "reconcile, then follows on_ambiguous"
        )
    if status is LeaseStatus.RELEASED:
        return "released: the next delivery runs the handler"
    return "none (final state)"


def what_to_check(record: Record) -> str | None:
    """What an operator should check before deciding on an `unknown` record, or a dead one
    marked `ambiguous` (None for any other)."""
    if record.state is State.DEAD and record.ambiguous:
        return (
            "the last allowed attempt's lease ended before 'sent' was recorded (its process died, "
            "or lost Firestore), and the event was buried dead: that attempt may have produced "
            f"its effect. Check: (1) the receiver, for the effect under the key {record.key} "
            "(Idempotency-Key); (2) the log lines of this key; (3) notes and steps below. Effect "
            f"there: nothing to do. Not there: `dedup revive --force {record.key}`, then deliver "
            "the event again"
        )
    if record.state is not State.UNKNOWN:
        return None
    return (
        "an attempt's lease ended before 'sent' was recorded and nothing could tell whether its "
        "effect happened: either its handler ran and its process died (or lost Firestore) "
        "before 'sent', or its claim landed while Firestore stayed unreachable until its time "
        "budget ended, and its handler never started. Check: (1) the receiver, for the effect "
        f"under the key {record.key} (Idempotency-Key); (2) the log lines of this key: an "
        "'unavailable' line saying the claim may have landed means that attempt never started "
        "its handler; (3) notes and steps below, what the attempt recorded before its effect. "
        f"Effect there: nothing to do. Not there: `dedup revive {record.key}`, then deliver the "
        "event again"
    )


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
        Field.AMBIGUOUS: record.ambiguous,
        "leaseExpiresAt": iso(record.lease_expires_at),
        "check": what_to_check(record),
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
        (Field.AMBIGUOUS, record.ambiguous),
    ]
    if (check := what_to_check(record)) is not None:
        rows.insert(2, ("check", check))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for name, value in rows:
        grid.add_row(cell(name), cell(value))
    return grid
