"""Where a deploy goes and what it may read only at deploy time: `Target`, `DeployError`,
shell quoting with values read when the plan runs (`DeployTimeReads`), and the gcloud reads."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tools.emulators import GENERATED_MANIFEST_MARK

ROOT = Path(__file__).resolve().parents[2]


GENERATED = f"{GENERATED_MANIFEST_MARK} for `make deploy-firebase`, which deletes it after.\n"
"""First line of the manifest it writes; `tools/emulators.py` removes a leftover with it."""


MANIFEST_FILE = "functions.yaml"


DEFAULT_SERVICE_ACCOUNT = "exactly-once-fn"


REGION_VARIABLE = "FUNCTION_REGION"
"""The functions' region in their environment (`functions.region`): firebase-tools sets it on
every function; `make deploy-gcloud` writes it into the env files."""


QUEUE_ID = re.compile(r"[A-Za-z0-9-]{1,100}")
"""A Cloud Tasks queue id; a task-queue function's name is its queue's id."""


ASGI_VARIABLE = "FUNCTION_USE_ASGI"
"""functions-framework's `--asgi` flag, as an environment variable."""


ASGI_KEY = "x-asgi"
"""Marks an async function's endpoint in the manifest: `make deploy-gcloud` serves it with
functions-framework's ASGI server; `make deploy-firebase` refuses it."""


class DeployError(Exception):
    """A deploy that must not start; the message says what to change."""


def refused(problem: DeployError) -> int:
    """Print `problem` as the deploy tools' command lines answer it, one `error:` line on
    stderr per line of its message, and return their exit status for it, 2."""
    for line in str(problem).splitlines():
        print(f"error: {line}", file=sys.stderr)
    return 2


@dataclass(frozen=True)
class Target:
    """Where and how to deploy: the project, its region, database location and account."""

    project: str
    region: str
    firestore_location: str | None = None
    service_account: str = DEFAULT_SERVICE_ACCOUNT
    project_number: str | None = None
    extra_topics: tuple[str, ...] = ()
    alert_channels: tuple[str, ...] = ()
    """Notification channels (ids or full names) of the alert policy `make monitoring` creates."""
    secret_versions: tuple[tuple[str, str], ...] = ()
    """(secret, version) pairs `make deploy-gcloud` pins instead of reading each latest one."""
    bucket_location: str | None = None
    """The Storage trigger's bucket location (`--bucket-location`); None: read at deploy time."""
    source: Path = field(default=ROOT)

    @property
    def service_account_email(self) -> str:
        """The runtime service account's email (a bare name lives in the project)."""
        if "@" in self.service_account:
            return self.service_account
        return f"{self.service_account}@{self.project}.iam.gserviceaccount.com"

    @property
    def env_dir(self) -> Path:
        """Where `env-files` writes gcloud's --env-vars-file files for this project."""
        return self.source / ".cache" / "deploy" / self.project


AT_DEPLOY = "\x00"
"""Brackets, in a planned argument, the file holding a value read at deploy time (`shell_join`
renders it as `$(cat FILE)`)."""


def shell_join(command: Sequence[str]) -> str:
    """`shlex.join`, except that an argument holding a value read at deploy time
    (`DeployTimeReads.value`) is double-quoted around `$(cat FILE)`, so the shell reads the file
    when the command runs."""
    words = []
    for word in command:
        if AT_DEPLOY not in word:
            words.append(shlex.quote(word))
            continue
        parts = word.split(AT_DEPLOY)
        rendered = "".join(
            f"$(cat {shlex.quote(part)})" if i % 2 else re.sub(r'([\\"$`])', r"\\\1", part)
            for i, part in enumerate(parts)
        )
        words.append(f'"{rendered}"')
    return " ".join(words)


def _python() -> str:
    """This interpreter, relative to the project when it is the project's venv."""
    executable = Path(sys.executable)
    try:
        return str(executable.relative_to(Path.cwd()))
    except ValueError:
        return str(executable)


@dataclass
class DeployTimeReads:
    """The values a plan can only know when it runs (a secret's latest version, the database's
    and the bucket's locations, the project's number): each is read by a command of its own,
    planned before every command that uses it, which writes it to a file under
    `.cache/deploy/<project>/at-deploy/`; the commands that use it read that file (`$(cat
    FILE)`). `make -n` thus prints the whole plan without credentials, and a read that fails, or
    a location REGION cannot serve, stops the deploy with the same message, before anything is
    deployed."""

    target: Target
    commands: dict[str, str] = field(default_factory=dict)
    """File (relative to the project) -> the command that writes it, in planning order."""

    def value(self, kind: str, key: str, *options: str) -> str:
        """A placeholder for the value `python -m tools.deploy read KIND OPTIONS` prints."""
        path = (self.target.env_dir / "at-deploy" / f"{kind}-{key}").relative_to(self.target.source)
        where = [f"--project={self.target.project}", f"--region={self.target.region}"]
        self.commands.setdefault(
            str(path),
            shell_join(
                [_python(), "-m", "tools.deploy", "read", kind, *where, *options, f"--out={path}"]
            ),
        )
        return f"{AT_DEPLOY}{path}{AT_DEPLOY}"

    def firestore_location(self, database: str) -> str:
        """The location of the Firestore `database`, read at deploy time."""
        return self.value("firestore-location", database.strip("()"), f"--database={database}")

    def bucket_location(self, bucket: str) -> str:
        """The bucket's location, read and checked against REGION at deploy time."""
        return self.value("bucket-location", bucket, f"--bucket={bucket}")

    def secret_version(self, secret: str) -> str:
        """The number of the secret's latest version, which must be enabled, at deploy time."""
        return self.value("secret-version", secret, f"--secret={secret}")

    def project_number(self) -> str:
        """The project's number, read at deploy time."""
        return self.value("project-number", self.target.project)

    def plan(self) -> list[str]:
        """The commands that read the values, to run before the others."""
        return list(self.commands.values())


def gcloud_error(stderr: str) -> str:
    """The line of gcloud's stderr that says what went wrong."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("ERROR")), lines[0] if lines else "?")


def ask_gcloud(command: list[str], what: str, how: str) -> str:
    """The stdout of a read-only gcloud `command` that prints `what`; `DeployError` with gcloud's
    reason and `how` to do without it when gcloud is missing, fails or prints nothing."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    except OSError:
        raise DeployError(f"gcloud is not installed, so {what} cannot be read. {how}") from None
    if done.returncode != 0 or not done.stdout.strip():
        why = gcloud_error(done.stderr)
        raise DeployError(f"could not read {what} (`{shlex.join(command)}`: {why}). {how}")
    return done.stdout.strip()


def read_firestore_location(project: str, database: str) -> str:
    """The location of a Firestore database, asked of gcloud; `DeployError` says how to set it."""
    command = [
        "gcloud", "firestore", "databases", "describe", f"--database={database}",
        f"--project={project}", "--format=value(locationId)", "--quiet",
    ]  # fmt: skip
    how = (
        "Create the database first (docs/deploy.md, step 3), or name its location: "
        "make ... FIRESTORE_LOCATION=nam5 (a multi-region such as nam5 or eur3, or a region)."
    )
    return ask_gcloud(command, f"the location of Firestore database {database} of {project}", how)


def read_secret_version(project: str, secret: str) -> str:
    """The number of the latest version of `secret`, which must be enabled, asked of gcloud
    (as firebase-tools resolves `latest` at deploy time); `DeployError` says how to pin it."""
    command = [
        "gcloud", "secrets", "versions", "describe", "latest", f"--secret={secret}",
        f"--project={project}", "--format=value(name,state)", "--quiet",
    ]  # fmt: skip
    how = f'Create it (docs/deploy.md), or pin its version: make ... SECRET_VERSIONS="{secret}=1".'
    name, _, state = ask_gcloud(
        command, f"the latest version of secret {secret} of {project}", how
    ).partition("\t")
    if state.strip() != "ENABLED":
        raise DeployError(
            f"the latest version of secret {secret} is {state.strip() or 'unknown'}, not ENABLED "
            "(firebase deploy refuses it too): add a new version"
        )
    return name.rsplit("/", 1)[-1]


def read_project_number(project: str) -> str:
    """The project's number, asked of gcloud; `DeployError` says how to pass it instead."""
    command = ["gcloud", "projects", "describe", project, "--format=value(projectNumber)"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    except OSError:
        done = subprocess.CompletedProcess(command, 1, "", "gcloud is not installed")
    number = done.stdout.strip()
    if done.returncode != 0 or not number.isdigit():
        why = gcloud_error(done.stderr)
        raise DeployError(
            f"could not read the number of project {project} (`{shlex.join(command)}`: {why}). "
            "Log in with `gcloud auth login`, or pass PROJECT_NUMBER=<number> (Console, "
            "project settings)."
        )
    return number


BUCKET_PARAM = "UPLOAD_BUCKET"


MIN_ATTEMPT_DEADLINE, MAX_ATTEMPT_DEADLINE = 180, 1800
"""Cloud Scheduler's attempt deadline: the function's timeout, within these bounds (seconds),
as firebase-tools sets it, so both paths give the job the same settings."""


MULTI_REGIONS = {
    "us": ("us-",),
    "eu": ("europe-",),
    "asia": ("asia-",),
    "nam4": ("us-central1", "us-east1"),
    "eur4": ("europe-west1", "europe-west4"),
    "asia1": ("asia-northeast1", "asia-northeast2"),
}
"""Multi- and dual-region bucket locations -> the regions (prefixes) a trigger there can serve."""


def default_bucket(project: str) -> str:
    """The project's default Cloud Storage bucket (Firebase projects since late 2024; an older
    project's `<project>.appspot.com` is named with UPLOAD_BUCKET in its env file)."""
    return f"{project}.firebasestorage.app"


def read_bucket_location(project: str, bucket: str) -> str:
    """The location of a Cloud Storage bucket, asked of gcloud at deploy time (lower case)."""
    command = [
        "gcloud", "storage", "buckets", "describe", f"gs://{bucket}", f"--project={project}",
        "--format=value(location)", "--quiet",
    ]  # fmt: skip
    how = (
        "Create the bucket first (Firebase console, Storage, Get started), or name another "
        "with UPLOAD_BUCKET in .env (an older project's is <project>.appspot.com)."
    )
    return ask_gcloud(command, f"the location of bucket {bucket}", how).lower()


def serves(region: str, location: str) -> bool:
    """True when a function in `region` can take the events of a bucket in `location`."""
    if region == location:
        return True
    return any(region.startswith(p) for p in MULTI_REGIONS.get(location, ()))
