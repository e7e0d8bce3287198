"""The `dedup` command group: global options, the target collection, Firestore errors."""

from __future__ import annotations

from typing import Any, NoReturn

import click
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions

from dedup.cli.listing import list_command
from dedup.cli.purge import purge
from dedup.cli.repair import release, revive
from dedup.cli.show import show
from dedup.cli.stats import stats
from dedup.cli.target import Target
from dedup.config import DEFAULT_DATABASE, DedupConfig
from dedup.errors import ConfigError


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
    """Inspect and repair the dedup records of exactly-once functions.

    Uses the Firestore emulator when FIRESTORE_EMULATOR_HOST is set, else the real project
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


for _command in (show, list_command, release, revive, purge, stats):
    cli.add_command(_command)
