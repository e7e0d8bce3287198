"""`dedup setup`: the records' TTL policy, indexes and roles, and their rules.

It applies, or with `--dry-run` prints, the gcloud commands of `setup_commands`: the TTL policy
on `expireAt`, the records' indexes, and the roles of the functions' service account; then it
prints the security-rules block that locks the collection (`rules_block`), to paste into
`firestore.rules`. The indexes depend on the database's edition (`--edition`): on Standard,
exemptions of the record fields no query filters on from the automatic single-field indexes;
on Enterprise, which creates no index by itself, the `ENTERPRISE_INDEXES` the CLI's queries use.

Invariants: every command names the collection group of the collection it is given (its last
segment, so `DEDUP_COLLECTION=tenants/a/records` gets `records`); on Standard, every field of
`UNINDEXED_FIELDS` is exempted, the handler's maps (`result`, `notes`, `steps`) among them, so
no record can reach Firestore's 40,000 index entries per document; each command is idempotent,
so a second run after a failure finishes the set-up.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

import click

from dedup.config import DEFAULT_COLLECTION, DEFAULT_DATABASE
from dedup.kernel.record import Field

UNINDEXED_FIELDS = (
    Field.EXPIRE_AT,
    Field.LAST_ATTEMPT_AT,
    Field.LEASE_STARTED_AT,
    Field.SENT_AT,
    Field.PAYLOAD_HASH,
    Field.LAST_ERROR,
    Field.RESULT,
    Field.NOTES,
    Field.STEPS,
)
"""Record fields no query filters or orders on: exempt from single-field indexes (each write
then costs fewer index entries; `expireAt` is a TTL field, which needs no index either).

`result`, `notes` and `steps` must be: they are maps of the handler's own values, and a Standard
database indexes every leaf of a map twice (ascending, descending), so a record within each of
their size limits (a 512 KiB result is room for 20,000 small numbers) could pass Firestore's
40,000 index entries per document and have its write refused. An exemption of a map covers
its subfields. With these exempt, a record's indexed fields make a few dozen entries whatever
the handler stores (`tests/cli/test_setup_index_entries.py`)."""


@dataclass(frozen=True)
class RecordsIndex:
    """One index of the records' collection on an Enterprise database: its fields in order,
    each with its direction, and the `dedup` commands whose queries it serves."""

    fields: tuple[tuple[str, Literal["ascending", "descending"]], ...]
    used_by: str
    """The queries it serves, as the docs list them."""


ENTERPRISE_INDEXES = (
    RecordsIndex(((Field.FIRST_ATTEMPT_AT, "descending"),),
                 "dedup list (newest first), dedup list --older-than"),
    RecordsIndex(((Field.FIRST_ATTEMPT_AT, "ascending"),),
                 "dedup purge (its count, then its pages, oldest first)"),
    RecordsIndex(((Field.STATE, "ascending"), (Field.FIRST_ATTEMPT_AT, "descending")),
                 "dedup list --state; dedup stats (the in-progress records); dedup revive --state"),
    RecordsIndex(((Field.STATE, "ascending"), (Field.SUFFIX, "ascending"),
                  (Field.FIRST_ATTEMPT_AT, "descending")),
                 "dedup list --state --suffix; dedup stats (a count per state and suffix); "
                 "dedup revive --state --suffix"),
    RecordsIndex(((Field.SUFFIX, "ascending"), (Field.FIRST_ATTEMPT_AT, "descending")),
                 "dedup list --suffix; dedup stats (its distinct suffixes, in order)"),
    RecordsIndex(((Field.SUBJECT, "ascending"), (Field.FIRST_ATTEMPT_AT, "descending")),
                 "dedup list --subject"),
)  # fmt: skip
"""The records' indexes on an Enterprise database, which creates none by itself and runs a
query without one by scanning the whole collection. Each serves the queries whose filters and
order name its leading fields in its order (equality filters first, then the order); no
library call queries the records, it reads them by key."""

Edition = Literal["standard", "enterprise"]
EDITIONS: tuple[Edition, ...] = ("standard", "enterprise")
"""Firestore's editions, as `gcloud firestore databases create --edition` names them."""

RECORDS_ROLES = ("roles/datastore.user",)
"""The project roles a function's service account needs for its dedup records."""


def collection_group(collection: str) -> str:
    """The collection group of a collection path: its last segment."""
    return collection.strip("/").rsplit("/", 1)[-1]


def ttl_command(project: str, database: str, collection: str) -> list[str]:
    """The gcloud command that turns on the TTL policy on the records' `expireAt`."""
    return [
        "gcloud", "firestore", "fields", "ttls", "update", Field.EXPIRE_AT,
        f"--collection-group={collection_group(collection)}", f"--database={database}",
        "--enable-ttl", f"--project={project}", "--quiet",
    ]  # fmt: skip


def index_commands(project: str, database: str, collection: str) -> list[list[str]]:
    """The gcloud commands that exempt `UNINDEXED_FIELDS` from single-field indexes."""
    return [
        [
            "gcloud",
            "firestore",
            "indexes",
            "fields",
            "update",
            name,
            f"--collection-group={collection_group(collection)}",
            f"--database={database}",
            "--disable-indexes",
            f"--project={project}",
            "--quiet",
        ]
        for name in UNINDEXED_FIELDS
    ]


def enterprise_index_commands(project: str, database: str, collection: str) -> list[list[str]]:
    """The gcloud commands that create `ENTERPRISE_INDEXES` (non-sparse, as Enterprise's own
    default): one `composite create` each, a one-field index included."""
    group = f"--collection-group={collection_group(collection)}"
    return [
        ["gcloud", "firestore", "indexes", "composite", "create", group, f"--database={database}",
         *(f"--field-config=field-path={name},order={order}" for name, order in index.fields),
         "--density=dense", f"--project={project}", "--quiet"]
        for index in ENTERPRISE_INDEXES
    ]  # fmt: skip


def edition_command(project: str, database: str) -> list[str]:
    """The gcloud command that prints the database's edition (`STANDARD` or `ENTERPRISE`;
    empty for a database created before editions, which is Standard)."""
    return [
        "gcloud", "firestore", "databases", "describe", f"--database={database}",
        f"--project={project}", "--format=value(databaseEdition)",
    ]  # fmt: skip


def read_edition(project: str, database: str) -> Edition:
    """The database's edition, asked of gcloud; a click error if gcloud cannot say."""
    command = edition_command(project, database)
    click.echo(f"+ {shlex.join(command)}", err=True)
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise click.ClickException(
            "gcloud is not installed: install the Google Cloud CLI, or pass --edition "
            "standard|enterprise"
        ) from exc
    answer = done.stdout.strip().lower()
    if done.returncode != 0:
        raise click.ClickException(
            f"could not read the edition of database {database} in {project} (gcloud exited "
            f"{done.returncode}: {done.stderr.strip()[-300:]}): check --project and --database, "
            "or pass --edition standard|enterprise"
        )
    if answer in ("", "database_edition_unspecified", "standard"):
        return "standard"  # Firestore's default, and every database made before editions
    if answer == "enterprise":
        return "enterprise"
    raise click.ClickException(
        f"database {database} in {project} has edition {answer!r}, which dedup setup does "
        "not know: pass --edition standard|enterprise"
    )


def role_commands(project: str, service_account: str) -> list[list[str]]:
    """The gcloud commands that grant `service_account` the `RECORDS_ROLES` on `project`."""
    return [
        [
            "gcloud",
            "projects",
            "add-iam-policy-binding",
            project,
            f"--member=serviceAccount:{service_account}",
            f"--role={role}",
            "--condition=None",
            "--quiet",
        ]
        for role in RECORDS_ROLES
    ]


SETUP_STEPS = ("ttl", "indexes", "roles")
"""What `dedup setup` does, in order; `--only` picks some."""


def setup_commands(
    project: str,
    database: str = DEFAULT_DATABASE,
    collection: str = DEFAULT_COLLECTION,
    service_account: str | None = None,
    steps: Sequence[str] = SETUP_STEPS,
    edition: Edition = "standard",
) -> list[list[str]]:
    """The gcloud commands of `steps` for the records of `collection` in `database`; the roles
    only with a `service_account`. The indexes are the `edition`'s: exemptions on Standard,
    the `ENTERPRISE_INDEXES` created on Enterprise."""
    if edition not in EDITIONS:
        raise ValueError(f"edition {edition!r} is not one of {', '.join(EDITIONS)}")
    commands: list[list[str]] = []
    if "ttl" in steps:
        commands.append(ttl_command(project, database, collection))
    if "indexes" in steps and edition == "enterprise":
        commands += enterprise_index_commands(project, database, collection)
    elif "indexes" in steps:
        commands += index_commands(project, database, collection)
    if "roles" in steps and service_account:
        commands += role_commands(project, service_account)
    return commands


def rules_block(collection: str = DEFAULT_COLLECTION) -> str:
    """The firestore.rules lines that lock the records away from clients (the functions' server
    libraries bypass rules), to paste inside `match /databases/{database}/documents`."""
    return f"match /{collection.strip('/')}/{{key}} {{ allow read, write: if false; }}"


ALREADY_EXISTS = "ALREADY_EXISTS"
"""What gcloud prints when an index to create is there already: a second run keeps it."""


def _run(commands: Sequence[list[str]]) -> None:
    for command in commands:
        click.echo(f"+ {shlex.join(command)}", err=True)
        creates = command[2:5] == ["indexes", "composite", "create"]
        returncode = _create_index(command) if creates else subprocess.run(command).returncode
        if returncode != 0:
            hint = (
                " (the Enterprise edition's indexes: on a Standard-edition database pass "
                "--edition standard, or --edition detect to read the edition)"
                if creates
                else ""
            )
            raise click.ClickException(f"{command[0]} exited {returncode}: {command}{hint}")


def _create_index(command: list[str]) -> int:
    """Run an index creation, its error output shown; 0 also when the index exists already
    (made by an earlier run: the step is idempotent, as the others are)."""
    done = subprocess.run(command, stderr=subprocess.PIPE, text=True, check=False)
    click.echo(done.stderr, err=True, nl=False)
    if done.returncode != 0 and ALREADY_EXISTS in done.stderr:
        click.echo("  (the index exists already: kept)", err=True)
        return 0
    return done.returncode


@click.command(name="setup")
@click.option("--project", "setup_project", metavar="PROJECT", help="Google Cloud project.")
@click.option("--database", "setup_database", metavar="DATABASE", help="Firestore database id.")
@click.option("--collection", "setup_collection", metavar="PATH", help="The records' collection.")
@click.option(
    "--service-account",
    metavar="EMAIL",
    help="The functions' service account, granted roles/datastore.user (else no role is granted).",
)
@click.option(
    "--only",
    type=click.Choice(SETUP_STEPS),
    multiple=True,
    help="Only this step (repeatable). [default: all]",
)
@click.option(
    "--edition",
    type=click.Choice([*EDITIONS, "detect"]),
    default="standard",
    show_default=True,
    help="The database's edition: the indexes step exempts fields on standard and creates the "
    "CLI's indexes on enterprise; detect asks gcloud (a read, also with --dry-run) when the "
    "indexes step runs.",
)
@click.option("--dry-run", is_flag=True, help="Print the commands, one a line; run nothing.")
@click.pass_context
def setup_command(
    ctx: click.Context,
    setup_project: str | None,
    setup_database: str | None,
    setup_collection: str | None,
    service_account: str | None,
    only: tuple[str, ...],
    edition: str,
    dry_run: bool,
) -> None:
    """Set the records up: TTL policy on expireAt, indexes, the service account's roles.

    Runs gcloud (or with --dry-run prints its commands, one a line, on standard output), then
    prints the firestore.rules block that locks the collection, to paste (standard error with
    --dry-run). Project, database and collection default to the dedup group's options and the
    DEDUP_* settings. The indexes are the edition's: on standard (the default), exemptions of
    the fields no query reads; on enterprise, which creates no index by itself, the indexes
    the dedup commands' queries use.
    """
    target = ctx.obj
    project = setup_project or getattr(target, "project", None)
    if not project:
        raise click.UsageError("no Google Cloud project: pass --project PROJECT")
    database = setup_database or getattr(target, "database", None) or DEFAULT_DATABASE
    collection = setup_collection or getattr(target, "collection", None) or DEFAULT_COLLECTION
    steps = only or SETUP_STEPS
    chosen: Edition = "standard"
    if edition != "detect":
        chosen = cast(Edition, edition)
    elif "indexes" in steps:  # the only step that differs between editions
        chosen = read_edition(project, database)
        click.echo(f"database {database} is {chosen} edition", err=True)
    commands = setup_commands(project, database, collection, service_account, steps, chosen)
    if dry_run:
        for command in commands:
            click.echo(shlex.join(command))
    else:
        _run(commands)
    notes = []
    if "roles" in steps and not service_account:
        notes.append(
            "roles: pass --service-account EMAIL to grant " + ", ".join(RECORDS_ROLES) + " to the "
            "account the functions run as"
        )
    if not only:
        notes.append(
            "security rules: paste this inside `match /databases/{database}/documents` of "
            f"firestore.rules, then deploy them:\n    {rules_block(collection)}"
        )
    for note in notes:
        click.echo(note, err=dry_run)
