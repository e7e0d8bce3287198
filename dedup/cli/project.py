"""`dedup manifest` and `dedup setup`: what a project that uses dedup needs around its functions.

`dedup manifest SOURCE_DIR` writes `SOURCE_DIR/functions.yaml`, firebase-functions' own manifest
of `SOURCE_DIR/main.py` with retries on (`with_retries`): firebase-functions writes
`retry: false` on Firestore, Storage and Database triggers, and without a retry a released lease
is never delivered again. The Firebase CLI reads a static `functions.yaml` in the source folder
instead of asking the SDK, so run it as `firebase.json`'s `predeploy` (docs/operations.md shows the
lines). `--check` writes nothing: it exits 1 naming every dedup function whose trigger would
deploy without retries (`retry_gaps`), from the `functions.yaml` present, else from the SDK's.

main.py is imported the way the Firebase CLI imports it: in a child process of the same Python,
with SOURCE_DIR as its working directory and first on `sys.path`. A child, so nothing main.py
declares (its suffixes, its apps, its modules) stays in the caller's process, and the command
can run twice in one process (tests, `tools/deploy.py`).

`dedup setup` applies, or with `--dry-run` prints, the gcloud commands of `setup_commands`: the
TTL policy on `expireAt`, the index exemptions of the record fields no query filters on, and the
roles of the functions' service account; then it prints the security-rules block that locks the
collection (`rules_block`), to paste into `firestore.rules`.

Private attributes of firebase-functions (checked with 0.6.0), used only here and in the
template's `tools/deploy.py`: `firebase_functions.private.serving.get_functions` (the SDK's own
discovery of main.py's functions) and `functions_as_yaml` (its manifest), and the
`__firebase_endpoint__` each decorated function carries.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import click
import yaml

from dedup.config import DEFAULT_COLLECTION, DEFAULT_DATABASE
from dedup.kinds import USES_DEDUP
from dedup.record import Field

MANIFEST_NAME = "functions.yaml"
"""The file the Firebase CLI reads instead of asking the SDK."""

WRITTEN_BY = "# Written by `dedup manifest`: firebase-functions' manifest with retries on.\n"
"""The first line of the manifest `dedup manifest` writes."""

MIN_SCHEDULE_RETRIES = 1
"""The least `retryCount` a schedule of a dedup function gets: a released lease needs a retry."""

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


class ManifestError(click.ClickException):
    """main.py could not be imported, or its manifest not built; the message says why."""


# --- the manifest -----------------------------------------------------------------------------


def with_retries(manifest: Mapping[str, Any], dedup_functions: Collection[str]) -> dict[str, Any]:
    """A copy of `manifest` with `retry: true` on every event trigger, and a `retryCount` of at
    least `MIN_SCHEDULE_RETRIES` on the schedule of every function named in `dedup_functions`."""
    done = copy.deepcopy(dict(manifest))
    for name, endpoint in done.get("endpoints", {}).items():
        trigger = endpoint.get("eventTrigger")
        if trigger is not None:
            trigger["retry"] = True
        schedule = endpoint.get("scheduleTrigger")
        if schedule is not None and name in dedup_functions:
            retry = schedule.get("retryConfig") or {}
            count = retry.get("retryCount")
            if not isinstance(count, int) or count < MIN_SCHEDULE_RETRIES:
                retry["retryCount"] = MIN_SCHEDULE_RETRIES
            schedule["retryConfig"] = retry
    return done


def retry_gaps(manifest: Mapping[str, Any], dedup_functions: Collection[str]) -> list[str]:
    """One line per dedup function that `manifest` would deploy without retries (or not at
    all), in name order; empty when every one is retried."""
    endpoints = manifest.get("endpoints") or {}
    gaps = []
    for name in sorted(dedup_functions):
        endpoint = endpoints.get(name)
        if endpoint is None:
            gaps.append(f"{name}: not in the manifest")
        elif (trigger := endpoint.get("eventTrigger")) is not None:
            if trigger.get("retry") is not True:
                gaps.append(f"{name}: eventTrigger.retry is {trigger.get('retry')!r}, not true")
        elif (schedule := endpoint.get("scheduleTrigger")) is not None:
            count = (schedule.get("retryConfig") or {}).get("retryCount")
            if not isinstance(count, int) or count < MIN_SCHEDULE_RETRIES:
                gaps.append(
                    f"{name}: scheduleTrigger.retryConfig.retryCount is {count!r}, not >= 1"
                )
    return gaps


_CHILD = """
import json, os, sys
sys.path.insert(0, os.getcwd())
from firebase_functions.private.serving import functions_as_yaml, get_functions
functions = get_functions()
with open(sys.argv[1], "w") as out:
    json.dump({"manifest": functions_as_yaml(functions),
               "dedup": sorted(n for n, f in functions.items() if getattr(f, sys.argv[2], None))},
              out)
"""
"""Run in SOURCE_DIR: the SDK's discovery and manifest of main.py, and the dedup functions."""


def sdk_manifest(source: Path) -> tuple[dict[str, Any], list[str]]:
    """firebase-functions' manifest of `source`/main.py and the names of its functions that use
    dedup (`trigger_once`), imported in a child process as the module docstring says."""
    if not (source / "main.py").is_file():
        raise ManifestError(f"no main.py in {source}: pass the functions' source folder")
    env = {k: v for k, v in os.environ.items() if k != "FUNCTION_TARGET"}
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "manifest.json"
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(out), USES_DEDUP],
            cwd=source, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise ManifestError(f"importing {source / 'main.py'} failed:\n{tail}")
        found = json.loads(out.read_text())
    return dict(yaml.safe_load(found["manifest"]) or {}), list(found["dedup"])


def write_manifest(source: Path) -> Path:
    """Write `source`/functions.yaml with retries on (`with_retries`); return its path."""
    manifest, dedup_functions = sdk_manifest(source)
    path = source / MANIFEST_NAME
    text = yaml.safe_dump(with_retries(manifest, dedup_functions), sort_keys=False)
    path.write_text(WRITTEN_BY + text)
    return path


def check_manifest(source: Path) -> list[str]:
    """`retry_gaps` of what a deploy of `source` would use: its functions.yaml if present,
    else the SDK's own manifest."""
    manifest, dedup_functions = sdk_manifest(source)
    static = source / MANIFEST_NAME
    if static.is_file():
        manifest = dict(yaml.safe_load(static.read_text()) or {})
    return retry_gaps(manifest, dedup_functions)


@click.command(name="manifest")
@click.argument(
    "source", type=click.Path(exists=True, file_okay=False, path_type=Path), metavar="SOURCE_DIR"
)
@click.option("--check", is_flag=True, help="Write nothing; exit 1 naming unretried functions.")
def manifest_command(source: Path, check: bool) -> None:
    """Write SOURCE_DIR/functions.yaml: the SDK's manifest of main.py, with retries on.

    Every event trigger gets retry: true, every schedule of a dedup function a retryCount of at
    least 1. Meant for firebase.json's predeploy. With --check, write nothing and exit 1 naming
    each dedup function whose trigger would deploy without retries (from the functions.yaml
    present, else from the SDK's own manifest).
    """
    source = source.resolve()
    if check:
        gaps = check_manifest(source)
        if gaps:
            where = source / MANIFEST_NAME
            origin = str(where) if where.is_file() else "the SDK's manifest (no functions.yaml)"
            lines = "\n".join(f"  {gap}" for gap in gaps)
            raise click.ClickException(
                f"these dedup functions would deploy without retries, by {origin}:\n{lines}\n"
                f"run `dedup manifest {source}` before the deploy (firebase.json predeploy)"
            )
        click.echo(f"every dedup function of {source / 'main.py'} deploys with retries")
        return
    path = write_manifest(source)
    click.echo(f"wrote {path}")


# --- setup ------------------------------------------------------------------------------------


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
