"""`dedup`: the command line for dedup records and the project they live in (`python -m dedup`,
or `dedup`).

    dedup show EVENT_ID SUFFIX | KEY [--json]      one record, readable or as JSON
    dedup list [--state S] [--suffix S] [--older-than 10m] [--limit N] [--json]
    dedup release KEY... [--yes]                   hand in-progress leases back
    dedup revive KEY... | --state dead|failed|unknown [--suffix S] [--yes]
    dedup purge --older-than 8d [--dry-run] [--force]  delete old records (no TTL policy)
    dedup stats [--json]                           counts, oldest live lease, stuck records
    dedup manifest [--check] SOURCE_DIR            functions.yaml with retries on
                   [--project-number=N]            (--check: warn of run.app URLs too long)
    dedup setup --project P [--dry-run]            TTL, index exemptions, roles; the rules block
    dedup dead-letters list SUBSCRIPTION [--json]  dead-lettered events (Cloud Run path), kept
    dedup dead-letters redrive SUBSCRIPTION --to URL  deliver them again, ack after a 2xx

The record commands talk to the Firestore emulator when FIRESTORE_EMULATOR_HOST is set, else to
the project named by `--project` (or GOOGLE_CLOUD_PROJECT / GCLOUD_PROJECT) through Application
Default Credentials. Records are read with `Record.from_snapshot`; every change is written with
a precondition on the document's update time, so a record that a delivery changed after the
command read it is left alone and reported, never overwritten.

Time is the database's: lease expiry and `--older-than` cut-offs are judged against a read
time of Firestore, never the local clock. Time filters use `firstAttemptAt`, the one
timestamp field of the record with a single-field index (`firestore.indexes.json`).

The modules: `target` (where the records are, how they are read), `guarded` (writes applied
only to documents unchanged since read), `render` (what the operator types and reads), `views`
(show, list, stats), `repair` (release, revive, purge), `manifest`, `setup` (`project`
re-exports both), `dead_letters` (the Cloud Run path's dead-lettered events, read over
`pubsub_rest`, rebuilt by `dead_letter_events`).
"""

from __future__ import annotations

from typing import Any, NoReturn

import click
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions

from dedup.cli.dead_letters import dead_letters
from dedup.cli.manifest import manifest_command
from dedup.cli.repair import purge, release, revive
from dedup.cli.setup import setup_command
from dedup.cli.target import Target
from dedup.cli.vendor import vendor_command
from dedup.cli.views import list_command, show, stats
from dedup.config import DEFAULT_DATABASE, DedupConfig
from dedup.errors import ConfigError

__all__ = ["cli", "main"]


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
    help="Firestore database id. [default: DEDUP_DATABASE or (default)]",
)
@click.option(
    "--collection",
    metavar="PATH",
    help="Collection of the dedup records. [default: DEDUP_COLLECTION or triggerEvents]",
)
@click.pass_context
def cli(
    ctx: click.Context, project: str | None, database: str | None, collection: str | None
) -> None:
    """Inspect and repair the dedup records of exactly-once functions; set a project up for them.

    manifest and setup prepare a deploy (retries on; TTL, indexes, roles, rules). The record
    commands use the Firestore emulator when FIRESTORE_EMULATOR_HOST is set, else the real project
    through Application Default Credentials. EVENT_ID SUFFIX map to a key in the functions'
    layout, DEDUP_KEY_LAYOUT (plain or spread).
    """
    try:
        env = DedupConfig.from_env()
        config = DedupConfig(
            collection=collection or env.collection,
            project=project or env.project,
            database=database or env.database or DEFAULT_DATABASE,
            key_layout=env.key_layout,
        )
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    ctx.obj = Target(
        project=config.project,
        database=config.database or DEFAULT_DATABASE,
        collection=config.collection,
        key_layout=config.key_layout,
    )


for _command in (
    show,
    list_command,
    release,
    revive,
    purge,
    stats,
    manifest_command,
    setup_command,
    vendor_command,
    dead_letters,
):
    cli.add_command(_command)


def main() -> None:
    """Console entry point (`dedup = "dedup.cli:main"`)."""
    cli()
