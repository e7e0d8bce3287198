"""`dedup manifest`: the manifest a deploy of a project that uses dedup reads, retries on.

`dedup manifest SOURCE_DIR` writes `SOURCE_DIR/functions.yaml`, firebase-functions' own manifest
of `SOURCE_DIR/main.py` with retries on (`with_retries`): firebase-functions writes
`retry: false` on Firestore, Storage and Database triggers, and without a retry a released lease
is never delivered again. The Firebase CLI reads a static `functions.yaml` in the source folder
instead of asking the SDK, so run it as `firebase.json`'s `predeploy` (docs/operations.md shows the
lines). `--check` writes nothing: it exits 1 naming every dedup function whose trigger would
deploy without retries (`retry_gaps`), from the `functions.yaml` present, else from the SDK's.

Writing and `--check` both refuse, naming the fix, what would deploy a function that cannot
start or deploy nothing: a bad DEDUP_* setting in the functions' env files (`.env`,
`.env.<project>`, `.env.local`, read as the Firebase CLI reads them: `dedup.cli.settings`), a
main.py that declares no function, and a `trigger_once` function of main.py that no
firebase-functions decorator wraps.

main.py is imported the way the Firebase CLI imports it: in a child process of the same Python,
with SOURCE_DIR as its working directory and first on `sys.path`, and the variables of the
env files a deploy to the project loads (`--project`, else GOOGLE_CLOUD_PROJECT or
GCLOUD_PROJECT, which the Firebase CLI sets for a predeploy hook). A child, so nothing main.py
declares (its suffixes, its apps, its modules) stays in the caller's process, and the command
can run twice in one process (tests, `tools/deploy`).

How main.py's functions are found, and the private attributes of firebase-functions that takes,
is `dedup.cli.discovery`, which the child runs.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import click
import yaml

from dedup.cli import discovery
from dedup.cli.render import source_and_check
from dedup.cli.settings import deploy_env, settings_problems
from dedup.cli.target import Target
from dedup.kinds import USES_DEDUP
from dedup.platform.run_names import run_app_problem, service_of

MANIFEST_NAME = "functions.yaml"
"""The file the Firebase CLI reads instead of asking the SDK."""

WRITTEN_BY = "# Written by `dedup manifest`: firebase-functions' manifest with retries on.\n"
"""The first line of the manifest `dedup manifest` writes."""

MIN_SCHEDULE_RETRIES = 1
"""The least `retryCount` a schedule of a dedup function gets: a released lease needs a retry."""


class ManifestError(click.ClickException):
    """main.py could not be imported, or its manifest not built; the message says why."""


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


class Discovered(NamedTuple):
    """What `sdk_manifest` found in main.py."""

    manifest: dict[str, Any]
    """firebase-functions' manifest of main.py's functions."""
    dedup_functions: list[str]
    """The deployed functions that use dedup (`trigger_once`)."""
    undeployed: list[str]
    """main.py's `trigger_once` functions that no firebase-functions decorator wraps."""


def sdk_manifest(source: Path, project: str | None = None) -> Discovered:
    """firebase-functions' manifest of `source`/main.py and its dedup functions, imported in a
    child process as the module docstring says, with the variables a deploy of `source` to
    `project` would give it (`dedup.cli.settings.deploy_env`) over this process's."""
    if not (source / "main.py").is_file():
        raise ManifestError(f"no main.py in {source}: pass the functions' source folder")
    env = {k: v for k, v in os.environ.items() if k != "FUNCTION_TARGET"}
    env.update(deploy_env(source, project))
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "manifest.json"
        done = subprocess.run(
            [sys.executable, discovery.__file__, str(out), USES_DEDUP],
            cwd=source, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise ManifestError(f"importing {source / 'main.py'} failed:\n{tail}")
        found = json.loads(out.read_text())
    manifest = dict(yaml.safe_load(found["manifest"]) or {})
    return Discovered(manifest, list(found["dedup"]), list(found["undeployed"]))


def source_problems(source: Path, project: str | None) -> list[str]:
    """Why a deploy of `source` would not start or would ship nothing, one line each: env files
    Firebase refuses or a bad DEDUP_* setting in them (`settings_problems`)."""
    return settings_problems(source, project)


def declaration_problems(found: Discovered, source: Path) -> list[str]:
    """Why main.py would deploy nothing, or not every dedup function, one line each."""
    problems = [
        f"{name}: declared with trigger_once but no firebase-functions decorator wraps it, so "
        "nothing deploys it; put the platform's decorator above @trigger_once "
        "(@firestore_fn.on_document_created(...), then @trigger_once(...), then def)"
        for name in found.undeployed
    ]
    if not (found.manifest.get("endpoints") or {}):
        problems.append(
            f"{source / 'main.py'} declares no function (no firebase-functions decorator found "
            "on its module-level functions): a deploy would ship nothing"
        )
    return problems


def _refuse(problems: list[str], what: str) -> None:
    if problems:
        lines = "\n".join(f"  {problem}" for problem in problems)
        raise click.ClickException(f"{what}:\n{lines}")


def write_manifest(source: Path, project: str | None = None) -> Path:
    """Write `source`/functions.yaml with retries on (`with_retries`); return its path.
    Refuses (`click.ClickException`, nothing written) a source whose settings or declarations
    would not deploy (`source_problems`, `declaration_problems`)."""
    _refuse(source_problems(source, project), "the functions' settings would not start")
    found = sdk_manifest(source, project)
    _refuse(declaration_problems(found, source), "main.py would not deploy its functions")
    path = source / MANIFEST_NAME
    text = yaml.safe_dump(with_retries(found.manifest, found.dedup_functions), sort_keys=False)
    path.write_text(WRITTEN_BY + text)
    return path


class Readiness(NamedTuple):
    """What `check_manifest` found, one line each."""

    problems: list[str]
    """What would keep the deploy from running every dedup function with retries."""
    warnings: list[str]
    """What would deploy but not work as meant (`run_app_warnings`)."""


def run_app_warnings(manifest: Mapping[str, Any], project_number: str) -> list[str]:
    """One line per function of `manifest` whose Cloud Run service would get no deterministic
    `run.app` URL in the project numbered `project_number` (`dedup.platform.run_names`)."""
    found = []
    for name, endpoint in sorted((manifest.get("endpoints") or {}).items()):
        service = service_of(str(endpoint.get("entryPoint") or name))
        if (problem := run_app_problem(name, service, project_number)) is not None:
            found.append(problem)
    return found


def check_manifest(
    source: Path, project: str | None = None, project_number: str | None = None
) -> Readiness:
    """What would keep a deploy of `source` from running every dedup function with retries:
    `source_problems`, `declaration_problems`, and the `retry_gaps` of its functions.yaml if
    present, else of the SDK's own manifest; and, given the project's number, the warnings of
    `run_app_warnings` about the SDK's manifest."""
    problems = source_problems(source, project)
    if problems:
        return Readiness(problems, [])
    found = sdk_manifest(source, project)
    warnings = run_app_warnings(found.manifest, project_number) if project_number else []
    manifest = found.manifest
    static = source / MANIFEST_NAME
    if static.is_file():
        manifest = dict(yaml.safe_load(static.read_text()) or {})
    problems = declaration_problems(found, source)
    if not (manifest.get("endpoints") or {}) and static.is_file():
        problems.append(f"{static} lists no function: a deploy would ship nothing")
    return Readiness(problems + retry_gaps(manifest, found.dedup_functions), warnings)


@click.command(name="manifest")
@source_and_check("naming what would not deploy")
@click.option(
    "--project-number",
    default=None,
    help="With --check: warn about each function whose run.app URL could not exist there.",
)
@click.pass_context
def manifest_command(
    ctx: click.Context, source: Path, check: bool, project_number: str | None
) -> None:
    """Write SOURCE_DIR/functions.yaml: the SDK's manifest of main.py, with retries on.

    Every event trigger gets retry: true, every schedule of a dedup function a retryCount of at
    least 1. Meant for firebase.json's predeploy. First the functions' env files (.env,
    .env.<project>, .env.local) are read as the Firebase CLI reads them and their DEDUP_*
    settings checked; main.py is imported with them. A bad setting, a main.py that declares no
    function, or a trigger_once function no firebase-functions decorator wraps is refused.
    With --check, write nothing and exit 1 naming each of those, and each dedup function whose
    trigger would deploy without retries (from the functions.yaml present, else from the SDK's
    own manifest). Given --project-number, --check also warns (on stderr, without failing)
    about each function whose Cloud Run service name and the project's number do not fit the
    63 characters of a run.app URL.
    """
    source = source.resolve()
    project = _project_of(ctx)
    if check:
        problems, warnings = check_manifest(source, project, project_number)
        for warning in warnings:
            click.echo(f"warning: {warning}", err=True)
        if problems:
            where = source / MANIFEST_NAME
            origin = str(where) if where.is_file() else "the SDK's manifest (no functions.yaml)"
            lines = "\n".join(f"  {problem}" for problem in problems)
            raise click.ClickException(
                f"a deploy of {source} is not ready (its functions as {origin} lists them):"
                f"\n{lines}\nfix what each line says, then run `dedup manifest "
                f"{source}` before the deploy (firebase.json predeploy)"
            )
        click.echo(f"every dedup function of {source / 'main.py'} deploys with retries")
        return
    path = write_manifest(source, project)
    click.echo(f"wrote {path}")


def _project_of(ctx: click.Context) -> str | None:
    """The project of the command line (`--project`, GOOGLE_CLOUD_PROJECT, GCLOUD_PROJECT; the
    Firebase CLI sets GCLOUD_PROJECT for a predeploy hook)."""
    target = ctx.find_object(Target)
    if target is not None and target.project:
        return target.project
    return os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("GCLOUD_PROJECT") or None
