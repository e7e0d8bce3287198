"""`dedup setup`: the records' TTL policy, index exemptions and roles, and their rules.

It applies, or with `--dry-run` prints, the gcloud commands of `setup_commands`: the TTL policy
on `expireAt`, the index exemptions of the record fields no query filters on, and the roles of
the functions' service account; then it prints the security-rules block that locks the
collection (`rules_block`), to paste into `firestore.rules`.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence

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
)
"""Record fields no query filters or orders on: exempt from single-field indexes (each write
then costs fewer index entries; `expireAt` is a TTL field, which needs no index either)."""

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
) -> list[list[str]]:
    """The gcloud commands of `steps` for the records of `collection` in `database`; the roles
    only with a `service_account`."""
    commands: list[list[str]] = []
    if "ttl" in steps:
        commands.append(ttl_command(project, database, collection))
    if "indexes" in steps:
        commands += index_commands(project, database, collection)
    if "roles" in steps and service_account:
        commands += role_commands(project, service_account)
    return commands


def rules_block(collection: str = DEFAULT_COLLECTION) -> str:
    """The firestore.rules lines that lock the records away from clients (the functions' server
    libraries bypass rules), to paste inside `match /databases/{database}/documents`."""
    return f"match /{collection.strip('/')}/{{key}} {{ allow read, write: if false; }}"


def _run(commands: Sequence[list[str]]) -> None:
    for command in commands:
        click.echo(f"+ {shlex.join(command)}", err=True)
        done = subprocess.run(command, check=False)
        if done.returncode != 0:
            raise click.ClickException(f"{command[0]} exited {done.returncode}: {command}")


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
@click.option("--dry-run", is_flag=True, help="Print the commands, one a line; run nothing.")
@click.pass_context
def setup_command(
    ctx: click.Context,
    setup_project: str | None,
    setup_database: str | None,
    setup_collection: str | None,
    service_account: str | None,
    only: tuple[str, ...],
    dry_run: bool,
) -> None:
    """Set the records up: TTL policy on expireAt, index exemptions, the service account's roles.

    Runs gcloud (or with --dry-run prints its commands, one a line, on standard output), then
    prints the firestore.rules block that locks the collection, to paste (standard error with
    --dry-run). Project, database and collection default to the dedup group's options and the
    DEDUP_* settings.
    """
    target = ctx.obj
    project = setup_project or getattr(target, "project", None)
    if not project:
        raise click.UsageError("no Google Cloud project: pass --project PROJECT")
    database = setup_database or getattr(target, "database", None) or DEFAULT_DATABASE
    collection = setup_collection or getattr(target, "collection", None) or DEFAULT_COLLECTION
    steps = only or SETUP_STEPS
    commands = setup_commands(project, database, collection, service_account, steps)
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
