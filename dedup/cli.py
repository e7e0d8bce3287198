"""`dedup`: the operator's command line for dedup records (`python -m dedup`, or `dedup`).

    dedup show EVENT_ID SUFFIX | KEY [--json]      one record, readable or as JSON
    dedup list [--state S] [--suffix S] [--older-than 10m] [--limit N] [--json]
    dedup release KEY... [--yes]                   hand in-progress leases back
    dedup revive --state dead|failed [--suffix S] [--yes]
    dedup purge --older-than 7d [--dry-run]        delete old records (no TTL policy)
    dedup stats [--json]                           counts, oldest live lease, stuck records

It talks to the Firestore emulator when FIRESTORE_EMULATOR_HOST is set, else to the project
named by `--project` (or GOOGLE_CLOUD_PROJECT / GCLOUD_PROJECT) through Application Default
Credentials. Records are read with `Record.from_snapshot`; every change is written with a
precondition on the document's update time, so a record that a delivery changed after the
command read it is left alone and reported, never overwritten.

Time is the database's: lease expiry and `--older-than` cut-offs are judged against a read
time of Firestore, never the local clock. Time filters use `firstAttemptAt`, the one
timestamp field of the record with a single-field index (`firestore.indexes.json`).
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import cached_property
from typing import Any, NoReturn

import click
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions
from google.cloud import firestore
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from dedup.config import DEFAULT_DATABASE, DedupConfig
from dedup.errors import ConfigError, InvalidSuffix, MissingEventId
from dedup.keys import dedup_key, validate_suffix
from dedup.record import Field, Record, State

BATCH_LIMIT = 500
"""Most writes Firestore accepts in one batch; purge, revive and release commit at most this."""

DEFAULT_LIST_LIMIT = 50
"""Rows `list` shows unless `--limit` says otherwise."""

CLOCK_DOCUMENT = "~clock"
"""A document id no record can have (see `dedup.keys`): reading it yields the database time."""

REVIVABLE_STATES = (State.DEAD.value, State.FAILED.value)
"""States `revive` hands back: final states other than sent, whose effect never happened."""

EMULATOR_CONNECT_SECONDS = 3.0
"""How long to wait for the emulator's port before reporting that it is not running."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# --- Durations --------------------------------------------------------------------------------

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


class DurationType(click.ParamType):
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


class SuffixType(click.ParamType):
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


# --- Where the records are --------------------------------------------------------------------


@dataclass
class Target:
    """The dedup collection the command works on; the Firestore client is made on first use."""

    project: str | None
    database: str
    collection: str

    @cached_property
    def client(self) -> firestore.Client:
        """The Firestore client (emulator or real project); raises a click error if unusable."""
        emulator = os.environ.get("FIRESTORE_EMULATOR_HOST", "").strip()
        if not self.project:
            where = "the emulator keeps each project's data apart" if emulator else "no emulator"
            raise click.UsageError(
                f"no Google Cloud project ({where}): pass --project PROJECT or set "
                "GOOGLE_CLOUD_PROJECT (for this repo's emulators: demo-exactly-once)"
            )
        if emulator:
            _require_emulator(emulator)
        try:
            return firestore.Client(project=self.project, database=self.database)
        except auth_exceptions.DefaultCredentialsError as exc:
            raise click.ClickException(
                "no Application Default Credentials: run `gcloud auth application-default "
                "login` (or set GOOGLE_APPLICATION_CREDENTIALS), or set FIRESTORE_EMULATOR_HOST "
                "to use the emulator"
            ) from exc

    @property
    def records(self) -> firestore.CollectionReference:
        """The dedup collection."""
        return self.client.collection(self.collection)

    def path(self, key: str) -> str:
        """`<collection>/<key>`, as shown to the operator."""
        return f"{self.collection}/{key}"

    def document(self, key: str) -> firestore.DocumentReference:
        """The record's document; a key that cannot be a document id is a usage error."""
        if not key or "/" in key or key in (".", ".."):
            raise click.BadParameter(
                f"{key!r} is not a record key: keys look like <eventId>-<suffix>; "
                "or pass EVENT_ID SUFFIX and the key is computed",
                param_hint="KEY",
            )
        return self.records.document(key)

    def database_now(self) -> datetime:
        """The database's current time: the read time of a one-document read."""
        read_time = self.records.document(CLOCK_DOCUMENT).get().read_time
        if read_time is None:  # pragma: no cover - Firestore always returns a read time
            raise click.ClickException("Firestore returned no read time")
        return read_time


def _require_emulator(host: str) -> None:
    """Fail fast when nothing listens at FIRESTORE_EMULATOR_HOST (the client would retry 5 min)."""
    name, _, port = host.rpartition(":")
    try:
        socket.create_connection((name.strip("[]"), int(port)), EMULATOR_CONNECT_SECONDS).close()
    except (OSError, ValueError) as exc:
        raise click.ClickException(
            f"no Firestore emulator answers at {host} (FIRESTORE_EMULATOR_HOST): start it "
            "with `make emulators`, or unset the variable to work on the real project"
        ) from exc


# --- Reading records --------------------------------------------------------------------------


class LeaseStatus(StrEnum):
    """A record's lease as seen at a database read time."""

    LIVE = "live"
    """A delivery holds the lease and it has not expired: a handler may be running."""
    EXPIRED = "expired"
    """The lease expired: its owner is presumed dead; the next delivery takes it over."""
    RELEASED = "released"
    """In progress with no lease: the next delivery runs the handler."""
    NONE = "none"
    """A final record (sent, failed, dead): no lease."""


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


def _records(snapshots: Iterable[firestore.DocumentSnapshot]) -> list[Record]:
    return [r for r in map(Record.from_snapshot, snapshots) if r is not None]


def _eq(name: str, value: Any) -> firestore.FieldFilter:
    return firestore.FieldFilter(name, "==", value)


def _filtered(query: Any, state: str | None, suffix: str | None) -> Any:
    """`query` narrowed to a state and a suffix (equality filters: single-field indexes)."""
    if state is not None:
        query = query.where(filter=_eq(Field.STATE, state))
    if suffix is not None:
        query = query.where(filter=_eq(Field.SUFFIX, suffix))
    return query


def _count(query: Any) -> int:
    """Documents matching `query`, counted by the server (an aggregation, no documents read)."""
    return int(query.count().get()[0][0].value)


# --- Presenting records -----------------------------------------------------------------------


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _relative(moment: datetime | None, now: datetime) -> str:
    """`2024-05-01 10:00:00Z (3m ago)`, or `-` for no time."""
    if moment is None:
        return "-"
    stamp = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    if moment <= now:
        return f"{stamp} ({format_duration(now - moment)} ago)"
    return f"{stamp} (in {format_duration(moment - now)})"


def _age(moment: datetime | None, now: datetime) -> str:
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
        Field.LEASE_STARTED_AT: _iso(record.lease_started_at),
        Field.LEASE_SECONDS: record.lease_seconds,
        Field.ATTEMPTS: record.attempts,
        Field.FIRST_ATTEMPT_AT: _iso(record.first_attempt_at),
        Field.LAST_ATTEMPT_AT: _iso(record.last_attempt_at),
        Field.SENT_AT: _iso(record.sent_at),
        Field.EXPIRE_AT: _iso(record.expire_at),
        Field.LAST_ERROR: record.last_error,
        Field.PAYLOAD_HASH: record.payload_hash,
        Field.MODE: record.mode.value,
        "leaseExpiresAt": _iso(record.lease_expires_at),
        "leaseStatus": lease_status(record, now).value,
        "readTime": _iso(now),
    }


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _console(*, stderr: bool = False) -> Console:
    """A rich console on click's current stream; markup off, as keys may contain brackets."""
    return Console(stderr=stderr, markup=False, emoji=False, highlight=False)


def _cell(value: object) -> Text:
    return Text("-" if value is None else str(value))


def _records_table(records: Sequence[Record], now: datetime, *, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("key", "state", "attempts", "first attempt", "lease", "last error"):
        table.add_column(column, overflow="fold")
    for record in records:
        table.add_row(
            _cell(record.key),
            _cell(record.state.value),
            _cell(record.attempts),
            _cell(f"{_age(record.first_attempt_at, now)} ago"),
            _cell(lease_status(record, now).value),
            _cell(_clip(record.last_error)),
        )
    return table


def _clip(text: str | None, width: int = 60) -> str | None:
    if text is None or len(text) <= width:
        return text
    return text[: width - 1] + "…"


# --- Guarded writes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class GuardedWrite:
    """An update (or, with `fields` None, a delete) of a document exactly as it was read."""

    snapshot: firestore.DocumentSnapshot
    fields: dict[str, Any] | None


@dataclass
class WriteTally:
    """What a series of guarded writes did."""

    done: int = 0
    """Writes applied."""
    changed: list[str] = field(default_factory=list)
    """Keys left alone: the record changed (or vanished) after it was read."""


def apply_guarded(
    client: firestore.Client,
    writes: Sequence[GuardedWrite],
    on_progress: Callable[[int], None] | None = None,
) -> WriteTally:
    """Apply `writes` in batches of <= 500, each only if its document is unchanged since read.

    A batch is atomic, so one stale document fails its whole batch: that batch is then
    retried one write at a time, and only the stale documents are skipped. `on_progress` is
    called with the number of writes settled after each batch.
    """
    tally = WriteTally()
    for start in range(0, len(writes), BATCH_LIMIT):
        chunk = writes[start : start + BATCH_LIMIT]
        if _commit(client, chunk):
            tally.done += len(chunk)
        else:
            for write in chunk:
                if _commit(client, [write]):
                    tally.done += 1
                else:
                    tally.changed.append(write.snapshot.id)
        if on_progress is not None:
            on_progress(len(chunk))
    return tally


def _commit(client: firestore.Client, writes: Sequence[GuardedWrite]) -> bool:
    """Commit `writes` as one batch; False if a document changed since it was read."""
    batch = client.batch()
    for write in writes:
        option = client.write_option(last_update_time=write.snapshot.update_time)
        if write.fields is None:
            batch.delete(write.snapshot.reference, option=option)
        else:
            batch.update(write.snapshot.reference, write.fields, option=option)
    try:
        batch.commit()
    except (api_exceptions.FailedPrecondition, api_exceptions.NotFound):
        return False
    return True


RELEASED_FIELDS: dict[str, Any] = {
    Field.STATE: State.IN_PROGRESS.value,
    Field.OWNER: None,
    Field.LEASE_STARTED_AT: None,
}
"""What `release` writes: the lease handed back; attempts and history kept."""

REVIVED_FIELDS: dict[str, Any] = {
    **RELEASED_FIELDS,
    Field.SENT: False,
    Field.ATTEMPTS: 0,
}
"""What `revive` writes: in progress, released, attempts back to 0 (`lastError` kept).

Attempts restart at 0 because a dead record has used `max_attempts` already: kept, the next
delivery would bury it again at once without running the handler. A revived event gets the
full retry budget, as if it were new.
"""


# --- The command group ------------------------------------------------------------------------


class DedupGroup(click.Group):
    """A click group that turns Firestore and credential errors into one-line click errors."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; Google API errors become `ClickException`s (exit status 1)."""
        try:
            return super().invoke(ctx)
        except api_exceptions.FailedPrecondition as exc:
            _fail_api(
                exc,
                "if it asks for an index, add it to firestore.indexes.json and run "
                "`make rules PROJECT=...`",
            )
        except api_exceptions.PermissionDenied as exc:
            _fail_api(
                exc,
                "the account needs Firestore access (roles/datastore.user; "
                "roles/datastore.viewer is enough for show, list and stats)",
            )
        except (api_exceptions.GoogleAPICallError, api_exceptions.RetryError) as exc:
            _fail_api(exc, "check that Firestore is reachable and the project and database exist")
        except auth_exceptions.GoogleAuthError as exc:
            _fail_api(exc, "run `gcloud auth application-default login`")


def _fail_api(exc: Exception, hint: str) -> NoReturn:
    message = " ".join(str(exc).split())
    raise click.ClickException(f"Firestore: {message} ({hint})") from exc


@click.group(name="dedup", cls=DedupGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--project",
    metavar="PROJECT",
    help="Google Cloud project. [default: GOOGLE_CLOUD_PROJECT or GCLOUD_PROJECT]",
)
@click.option(
    "--database",
    metavar="DATABASE",
    default=DEFAULT_DATABASE,
    show_default=True,
    help="Firestore database id.",
)
@click.option(
    "--collection",
    metavar="PATH",
    help="Collection of the dedup records. [default: DEDUP_COLLECTION or triggerEvents]",
)
@click.pass_context
def cli(ctx: click.Context, project: str | None, database: str, collection: str | None) -> None:
    """Inspect and repair the dedup records of exactly-once functions.

    Uses the Firestore emulator when FIRESTORE_EMULATOR_HOST is set, else the real project
    through Application Default Credentials.
    """
    try:
        env = DedupConfig.from_env()
        config = DedupConfig(
            collection=collection or env.collection,
            project=project or env.project,
            database=database,
        )
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    ctx.obj = Target(project=config.project, database=config.database, collection=config.collection)


def _json_option[F: Callable[..., Any]](command: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(command)


def _yes_option[F: Callable[..., Any]](command: F) -> F:
    return click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")(command)


# --- show -------------------------------------------------------------------------------------


@cli.command()
@click.argument("key_or_event_id", metavar="EVENT_ID SUFFIX | KEY")
@click.argument("suffix", required=False, type=SUFFIX, metavar="")
@_json_option
@click.pass_obj
def show(target: Target, key_or_event_id: str, suffix: str | None, as_json: bool) -> None:
    """Show one record, by EVENT_ID SUFFIX or by KEY (`<eventId>-<suffix>`)."""
    key = _key(key_or_event_id, suffix)
    snapshot = target.document(key).get()
    record = Record.from_snapshot(snapshot)
    if record is None:
        raise click.ClickException(
            f"no record {target.path(key)}: check the event id and suffix (or the key), "
            "or find it with `dedup list --suffix SUFFIX`"
        )
    now = snapshot.read_time or target.database_now()
    if as_json:
        _echo_json(record_json(record, target.path(key), now))
        return
    _console().print(_record_grid(record, target.path(key), now))


def _key(key_or_event_id: str, suffix: str | None) -> str:
    if suffix is None:
        return key_or_event_id
    try:
        return dedup_key(key_or_event_id, suffix)
    except (MissingEventId, InvalidSuffix) as exc:
        raise click.BadParameter(str(exc)) from exc


def _record_grid(record: Record, path: str, now: datetime) -> Table:
    rows: list[tuple[str, object]] = [
        ("path", path),
        (Field.STATE, record.state.value),
        ("lease", describe_lease(record, now)),
        (Field.EVENT_ID, record.event_id),
        (Field.SUFFIX, record.suffix),
        (Field.MODE, record.mode.value),
        (Field.ATTEMPTS, record.attempts),
        (Field.SENT, record.sent),
        (Field.OWNER, record.owner),
        (Field.LEASE_STARTED_AT, _relative(record.lease_started_at, now)),
        (Field.LEASE_SECONDS, record.lease_seconds),
        (Field.FIRST_ATTEMPT_AT, _relative(record.first_attempt_at, now)),
        (Field.LAST_ATTEMPT_AT, _relative(record.last_attempt_at, now)),
        (Field.SENT_AT, _relative(record.sent_at, now)),
        (Field.EXPIRE_AT, _relative(record.expire_at, now)),
        (Field.PAYLOAD_HASH, record.payload_hash),
        (Field.LAST_ERROR, record.last_error),
    ]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for name, value in rows:
        grid.add_row(_cell(name), _cell(value))
    return grid


# --- list -------------------------------------------------------------------------------------


@cli.command(name="list")
@click.option("--state", type=click.Choice([s.value for s in State]), help="Only this state.")
@click.option("--suffix", type=SUFFIX, help="Only this function's records.")
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
@_json_option
@click.pass_obj
def list_command(
    target: Target,
    state: str | None,
    suffix: str | None,
    older_than: timedelta | None,
    limit: int,
    as_json: bool,
) -> None:
    """List records, newest first (by firstAttemptAt).

    With --state or --suffix, Firestore needs a composite index (that field, then
    firstAttemptAt descending); the error message links to its creation when it is missing.
    """
    now = target.database_now()
    query = _filtered(target.records, state, suffix)
    if older_than is not None:
        query = query.where(
            filter=firestore.FieldFilter(Field.FIRST_ATTEMPT_AT, "<", now - older_than)
        )
    query = query.order_by(Field.FIRST_ATTEMPT_AT, direction=firestore.Query.DESCENDING)
    records = _records(query.limit(limit).stream())
    if as_json:
        _echo_json([record_json(r, target.path(r.key), now) for r in records])
        return
    if not records:
        click.echo(f"no records in {target.collection} match")
        return
    more = f"; more may exist, raise --limit ({limit})" if len(records) == limit else ""
    title = f"{len(records)} record(s) in {target.collection}, newest first{more}"
    _console().print(_records_table(records, now, title=title))


# --- release ----------------------------------------------------------------------------------


@cli.command()
@click.argument("keys", nargs=-1, required=True, metavar="KEY...")
@_yes_option
@click.pass_obj
def release(target: Target, keys: tuple[str, ...], yes: bool) -> None:
    """Hand in-progress leases back; the next delivery runs the handler.

    For a record whose handler crashed under a long lease. Releasing a live lease of a handler
    that is still running lets a redelivery run it a second time: check `show` first.
    Exits with status 1 if a key is missing or not in progress.
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
            writes.append(GuardedWrite(snapshot, RELEASED_FIELDS))
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


@cli.command()
@click.option(
    "--state", type=click.Choice(REVIVABLE_STATES), required=True, help="Which final records."
)
@click.option("--suffix", type=SUFFIX, help="Only this function's records.")
@_yes_option
@click.pass_obj
def revive(target: Target, state: str, suffix: str | None, yes: bool) -> None:
    """Make dead or failed records runnable again (attempts reset to 0).

    Each becomes in_progress and released: the next delivery of the event runs its handler
    with a full `max_attempts` budget (`lastError` is kept). The platform does not redeliver
    an event on its own once its record was final, and instances that saw the record final
    may skip it from their in-memory cache: see the README runbook.
    """
    now = target.database_now()
    snapshots = [s for s in _filtered(target.records, state, suffix).stream() if s.exists]
    if not snapshots:
        click.echo(f"no {state} records" + (f" with suffix {suffix}" if suffix else ""))
        return
    writes = [GuardedWrite(s, REVIVED_FIELDS) for s in snapshots]
    _confirm_writes(target, writes, now, f"Revive {state}", yes)
    tally = apply_guarded(target.client, writes)
    _report(target, tally, "revived")


def _confirm_writes(
    target: Target, writes: Sequence[GuardedWrite], now: datetime, action: str, yes: bool
) -> None:
    """Show the records about to change and ask (unless `yes`); aborts on refusal."""
    records = _records(w.snapshot for w in writes)
    _console().print(_records_table(records, now, title=f"{len(records)} record(s)"))
    live = sum(lease_status(r, now) is LeaseStatus.LIVE for r in records)
    if live:
        click.echo(f"warning: {live} lease(s) still live: their handlers may be running")
    if not yes:
        click.confirm(f"{action} {len(records)} record(s) in {target.collection}?", abort=True)


def _report(target: Target, tally: WriteTally, verb: str) -> None:
    click.echo(f"{verb} {tally.done} record(s)")
    for key in tally.changed:
        click.echo(f"{target.path(key)}: changed since read, left alone (look again with `show`)")


# --- purge ------------------------------------------------------------------------------------

_PURGE_FIELDS = [
    Field.STATE,
    Field.OWNER,
    Field.LEASE_STARTED_AT,
    Field.LEASE_SECONDS,
    Field.FIRST_ATTEMPT_AT,
]
"""What purge reads of each record: enough to spare live leases and to page by first attempt."""


@cli.command()
@click.option(
    "--older-than",
    type=DURATION,
    required=True,
    metavar="DURATION",
    help="Delete records first attempted before now - this, e.g. 7d.",
)
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; change nothing.")
@click.pass_obj
def purge(target: Target, older_than: timedelta, dry_run: bool) -> None:
    """Delete records first attempted before a duration ago (no TTL).

    For projects without a TTL policy on expireAt. Deletes in batches of 500, sparing
    records whose lease is still live. Keep --older-than above the platform's retry window
    (7d for Pub/Sub and Eventarc): a redelivery that finds no record runs the handler again.
    """
    now = target.database_now()
    cutoff = now - older_than
    query = target.records.where(filter=firestore.FieldFilter(Field.FIRST_ATTEMPT_AT, "<", cutoff))
    total = _count(query)
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
        f"{verb} {tally.done} record(s) first attempted before {_relative(cutoff, now)}; "
        f"spared {spared} with a live lease, {len(tally.changed)} changed since read"
    )


def _live(snapshot: firestore.DocumentSnapshot, now: datetime) -> bool:
    record = Record.from_snapshot(snapshot)
    return record is not None and record.lease_live(now)


def _pages(query: Any, size: int = BATCH_LIMIT) -> Iterator[list[firestore.DocumentSnapshot]]:
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
        console=_console(stderr=True),
    )


# --- stats ------------------------------------------------------------------------------------


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


@cli.command()
@_json_option
@click.pass_obj
def stats(target: Target, as_json: bool) -> None:
    """Counts by suffix and state, oldest live lease, oldest stuck record.

    Counts are server-side aggregations; only in-progress records are read.
    """
    now = target.database_now()
    counts = {
        suffix: {s.value: _count(_filtered(target.records, s.value, suffix)) for s in State}
        for suffix in _suffixes(target.records)
    }
    in_progress = _records(_filtered(target.records, State.IN_PROGRESS.value, None).stream())
    result = Stats(now=now, counts=counts, in_progress=in_progress)
    if as_json:
        _echo_json(_stats_json(target, result))
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
        "readTime": _iso(result.now),
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
            _cell(suffix), *(_cell(by_state[s.value]) for s in State), _cell(sum(by_state.values()))
        )
    totals = [sum(c[s.value] for c in result.counts.values()) for s in State]
    table.add_row(_cell("all"), *map(_cell, totals), _cell(sum(totals)), style="bold")
    console = _console()
    console.print(table)
    leases = result.lease_counts()
    console.print(
        f"in progress: {leases['live']} live lease(s), {leases['expired']} stuck past their "
        f"lease, {leases['released']} released (waiting for a redelivery)"
    )
    live, stuck = result.oldest_live_lease(), result.oldest_stuck()
    if live is not None:
        console.print(
            f"oldest live lease: {target.path(live.key)}, started "
            f"{_age(live.lease_started_at, result.now)} ago, {describe_lease(live, result.now)}"
        )
    if stuck is not None:
        console.print(
            f"oldest stuck: {target.path(stuck.key)}, first attempt "
            f"{_age(stuck.first_attempt_at, result.now)} ago, {stuck.attempts} attempt(s), "
            f"lease {describe_lease(stuck, result.now)}"
        )


def main() -> None:
    """Console entry point (`dedup = "dedup.cli:main"`)."""
    cli()
