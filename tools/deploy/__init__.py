"""Deployment plans for the Makefile, all built from the one manifest `main.py` declares.

    venv/bin/python -m tools.deploy manifest [OUT] [OPTIONS]   # functions.yaml for firebase
    venv/bin/python -m tools.deploy env-files OPTIONS          # gcloud's --env-vars-file files
    venv/bin/python -m tools.deploy plan WHAT OPTIONS [--make] # shell commands, one per line
        WHAT: deploy-gcloud | bootstrap | topics | queues | monitoring
              | deploy-run | bootstrap-run | run-names (tools.deploy_run: the Cloud Run path)
    venv/bin/python -m tools.deploy read KIND OPTIONS [--out=FILE] # one deploy-time value
        KIND: firestore-location [--database=D] | bucket-location --bucket=B
              | secret-version --secret=S | project-number
    OPTIONS: --project=P --region=R [--firestore-location=L] [--bucket-location=L]
             [--service-account=NAME]
             [--project-number=N] [--topics="a b"] [--alert-channels="c1 c2"]
             [--secret-versions="SECRET=3 OTHER=1"]

`make deploy-firebase`, `make deploy-gcloud`, `make bootstrap`, `make topics`, `make queues` and
`make monitoring` call these; `make -n TARGET` prints the planned commands (with `--make` the
plan is one line that the Makefile splits back into recipe lines). Planning asks gcloud
nothing: a value only the project knows (a secret's latest version, the database's or the
bucket's location, the project's number) and not given as an option is read when the plan runs,
by a `read` command the plan puts before the commands that use it (`DeployTimeReads`), so
`make -n` needs no account and no network. See docs/deploy.md for the
first deploy, docs/observability.md for `make monitoring`.

The manifest is the SDK's own (firebase-functions builds it from `main.py`, runtime shape
included), completed with what depends on the target project:

* `retry: true` on every event trigger (`dedup.cli.project.with_retries`, the code of
  `dedup manifest`): firebase-functions-python writes `retry: false` for Firestore triggers
  (firebase/firebase-functions-python#165), and without retries a released lease is never
  retried. The Firebase CLI reads a static `functions.yaml` in the source folder instead of
  asking the SDK, so `make deploy-firebase` writes this one, deploys, and removes it.
* `region: [REGION]` on every function, and the Firestore database's location on every
  Firestore trigger (`--firestore-location`, else read with `gcloud firestore databases
  describe` when the manifest is written, at deploy time; a multi-region database such as nam5
  or eur3 keeps its own name).
* the runtime service account (`make bootstrap` creates it) on every function.

The functions are the ones main.py exports (`tools.exports`): an export no path can deploy is
an error naming it, never dropped. An async function (`functions.asgi`) is marked `x-asgi`:
only `make deploy-gcloud` deploys it, with `FUNCTION_USE_ASGI=true`. A task-queue function
whose name is no valid queue id is refused by every plan. Secrets are pinned, on both paths,
to the version that is the latest at deploy time.

The runtime (`--runtime=python313`...) is the venv's Python's (`deploy_runtime`, from
`tools.runtime`, the one place every deploy path asks); a firebase.json that says another is
refused, naming both, before anything deploys.

Before anything is planned, every function's timeout is checked against the dedup lease of the
env files both paths deploy (`.env`, then `.env.<project>`, read as Firebase reads them):
`DedupConfig.from_env(..., function_timeout_seconds=...)` refuses a lease shorter than
timeout + DEDUP_RPC_TIMEOUT_SECONDS, and a misspelled DEDUP_* variable.
"""

from __future__ import annotations

import logging
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dedup import kinds
from dedup.cli.project import RECORDS_ROLES, with_retries
from dedup.config import DedupConfig, telemetry_enabled
from dedup.errors import ConfigError
from dedup.record import OutcomeKind
from dedup.telemetry import SEVERITY
from tools import firebase_dotenv
from tools.emulators import GENERATED_MANIFEST_MARK
from tools.exports import DeclarationError, Exported, exported_functions
from tools.runtime import RuntimeMismatch, runtime_of_venv

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
APIS = (
    "cloudfunctions.googleapis.com",
    "run.googleapis.com",
    "cloudbuild.googleapis.com",
    "artifactregistry.googleapis.com",
    "eventarc.googleapis.com",
    "pubsub.googleapis.com",
    "firestore.googleapis.com",
    "secretmanager.googleapis.com",
    "cloudtasks.googleapis.com",
)
"""APIs `make bootstrap` enables (plus fcm.googleapis.com when notifications go through FCM)."""
RUNTIME_ROLES = {
    **{role: "Firestore: the dedup records and the functions' documents" for role in RECORDS_ROLES},
    "roles/pubsub.publisher": "Pub/Sub publish: relay_outbox",
}
"""Project roles of the runtime service account, whatever the functions are."""
TRIGGER_ROLES = {
    "roles/eventarc.eventReceiver": "receive the events of the triggers it is the identity of",
    "roles/run.invoker": "invoke the functions' Cloud Run services for Eventarc and Pub/Sub",
}
"""Roles of the account as the event triggers' identity (firebase-tools gives them to the
default compute account; here the functions' own account is the trigger identity)."""
FCM_ROLE = "roles/firebasecloudmessaging.admin"
"""cloudmessaging.messages.create, for FcmNotifier; granted only when NOTIFY_URL is unset."""
ENQUEUER_ROLE = "roles/cloudtasks.enqueuer"
"""Granted only when main.py declares a task queue function."""
ACT_AS_ROLE = "roles/iam.serviceAccountUser"
"""Granted to the runtime account on itself when main.py declares a task queue function: its
tasks carry an OIDC token for that account."""
SECRET_ROLE = "roles/secretmanager.secretAccessor"
"""Granted on each secret a function declares, not on the project."""
PUBSUB_AGENT_ROLE = "roles/iam.serviceAccountTokenCreator"
"""What firebase-tools grants the Pub/Sub service agent (authenticated push) and gcloud does not."""


TELEMETRY_ROLES = {
    "roles/cloudtrace.agent": "send spans to Cloud Trace (DEDUP_OTEL=1)",
    "roles/monitoring.metricWriter": "send metrics to Cloud Monitoring (DEDUP_OTEL=1)",
}
"""Granted only when the env files set DEDUP_OTEL=1 (functions.observability)."""
TELEMETRY_APIS = ("cloudtrace.googleapis.com", "monitoring.googleapis.com")
"""Enabled by `make bootstrap` only when the env files set DEDUP_OTEL=1."""
MONITORED_OUTCOMES = {
    kind.value: why
    for kind, why in {
        OutcomeKind.DEAD: "gave up after max_attempts, the effect never happened",
        OutcomeKind.LEASE_LOST: "a delivery outlived its lease and another took it over",
        OutcomeKind.PAYLOAD_MISMATCH: "an event id was reused for a different payload",
        OutcomeKind.FAILED: "the handler raised TerminalError (or Firestore refused its data)",
    }.items()
    if SEVERITY[kind] >= logging.ERROR
}
"""Outcomes (the `outcome` field of dedup's log line) `make monitoring` counts, one log-based
metric each, named `dedup_<outcome>`, with why each matters: the outcomes whose log line is an
ERROR in dedup's one outcome table, `dedup.telemetry.SEVERITY` (tests/deploy/test_monitoring.py
holds the two together)."""
ALERTED_OUTCOME = "dead"
ALERT_POLICY_NAME = "dedup: dead events"
"""The alert policy's display name: how `make monitoring` finds an existing one."""


class DeployError(Exception):
    """A deploy that must not start; the message says what to change."""


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


# --- values read at deploy time ----------------------------------------------------------------

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


def read_now(kind: str, target: Target, *, database: str, bucket: str, secret: str) -> str:
    """The value `DeployTimeReads` planned for `kind`, read now (`python -m tools.deploy read`);
    `DeployError` as when the plan read it itself."""
    if kind == "firestore-location":
        return read_firestore_location(target.project, database or "(default)")
    if kind == "bucket-location":
        return storage_trigger_region({"eventFilters": {"bucket": bucket}}, target)
    if kind == "secret-version":
        return read_secret_version(target.project, secret)
    if kind == "project-number":
        return read_project_number(target.project)
    raise DeployError(
        f"unknown value {kind!r}: firestore-location, bucket-location, secret-version or "
        "project-number"
    )


# --- the manifest -------------------------------------------------------------------------------


def sdk_manifest(source: Path = ROOT) -> dict[str, Any]:
    """The manifest firebase-functions builds from the functions `source`/main.py exports
    (`tools.exports`), as a dict; an async function's endpoint is marked `ASGI_KEY: true`.
    `DeployError` names an exported function no deploy path could deploy."""
    from firebase_functions.private.serving import functions_as_yaml

    try:
        exported = exported_functions(source)
    except DeclarationError as exc:
        raise DeployError(str(exc)) from None
    carriers = {f.endpoint.entryPoint or f.name: _Carrier(f) for f in exported}
    manifest = dict(yaml.safe_load(functions_as_yaml(carriers)))
    for function in exported:
        if function.asgi:
            manifest["endpoints"][function.endpoint.entryPoint or function.name][ASGI_KEY] = True
    return manifest


class _Carrier:
    """What `functions_as_yaml` reads of a function: its endpoint and the APIs it requires."""

    def __init__(self, exported: Exported) -> None:
        self.__firebase_endpoint__ = exported.endpoint
        apis = getattr(exported.function, "__required_apis", None)
        if apis is not None:
            setattr(self, "__required_apis", apis)


def is_asgi(endpoint: Mapping[str, Any]) -> bool:
    """True for an async function (`functions.asgi`): only gcloud deploys it, served by ASGI."""
    return bool(endpoint.get(ASGI_KEY))


def endpoints(manifest: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(function name, endpoint) pairs of a manifest, in name order."""
    yield from sorted(manifest.get("endpoints", {}).items())


def kind_of_trigger(endpoint: Mapping[str, Any]) -> kinds.Kind:
    """The kind (`dedup.kinds`) of an endpoint's event trigger: what its deploy needs."""
    trigger = endpoint.get("eventTrigger") or {}
    event_type = trigger.get("eventType")
    return kinds.kind_of(event_type if isinstance(event_type, str) else None)


def trigger_topic(endpoint: Mapping[str, Any]) -> str | None:
    """The topic id of a Pub/Sub trigger, else None."""
    trigger = endpoint.get("eventTrigger") or {}
    if not trigger or kind_of_trigger(endpoint).name != "pubsub":
        return None
    return str(trigger["eventFilters"]["topic"]).rsplit("/", 1)[-1]


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


def deploy_env(target: Target) -> dict[str, str]:
    """The variables both deploy paths give the functions: `.env`, then `.env.<project>`."""
    files = firebase_dotenv.project_env_files(target.source, target.project)
    try:
        return dict(firebase_dotenv.load(files))
    except firebase_dotenv.EnvFileError as exc:
        raise DeployError(str(exc)) from None


def check_timeouts(manifest: Mapping[str, Any], env: Mapping[str, str]) -> None:
    """Refuse a function without an explicit timeout, or whose dedup lease does not cover it."""
    for name, endpoint in endpoints(manifest):
        timeout = endpoint.get("timeoutSeconds")
        if not isinstance(timeout, int):
            raise DeployError(
                f"{name} declares no timeout: set timeout_sec in functions/__init__.py's "
                "options.set_global_options(...) or in the function's decorator."
            )
        try:
            DedupConfig.from_env(env).check_lease_covers(timeout)
        except ConfigError as exc:
            raise DeployError(f"{name} (timeout {timeout} s): {exc}") from None


def check_queue_names(manifest: Mapping[str, Any]) -> None:
    """Refuse a task-queue function whose name Cloud Tasks would refuse as its queue's id."""
    for name, endpoint in endpoints(manifest):
        if "taskQueueTrigger" in endpoint and not QUEUE_ID.fullmatch(name):
            raise DeployError(
                f"{name} is a task-queue function, and its name is its Cloud Tasks queue's id, "
                "which holds only letters, digits and '-' (at most 100): export it from main.py "
                f"under another name, e.g. {_queue_name_hint(name)} (docs/tasks.md)"
            )


def _queue_name_hint(name: str) -> str:
    head, *rest = [part for part in re.split(r"[^A-Za-z0-9]+", name) if part] or ["task"]
    return (head + "".join(p[:1].upper() + p[1:] for p in rest))[:100]


def deploy_manifest(
    sdk: Mapping[str, Any],
    target: Target,
    env: Mapping[str, str],
    *,
    for_deploy: bool = True,
    reads: DeployTimeReads | None = None,
) -> dict[str, Any]:
    """The SDK's manifest completed for `target` (see the module docstring). `for_deploy`: check
    the timeouts first and put the database's and the bucket's locations on their triggers (the
    other plans need neither). With `reads`, a location not given in `target` is left to be read
    at deploy time (a placeholder, `DeployTimeReads`) instead of being read now."""
    check_queue_names(sdk)
    if for_deploy:
        check_timeouts(sdk, env)
    # Retries on, as `dedup manifest` puts them (every function of this template uses dedup).
    manifest = with_retries(sdk, dedup_functions=[name for name, _ in endpoints(sdk)])
    resolve_params(manifest, target, env)
    locations: dict[str, str] = {}
    for _, endpoint in endpoints(manifest):
        endpoint["region"] = [target.region]
        endpoint["serviceAccountEmail"] = target.service_account_email
        trigger = endpoint.get("eventTrigger")
        if trigger is None:
            continue
        location = kind_of_trigger(endpoint).deploy.location
        if location == "database" and for_deploy:
            database = trigger.get("eventFilters", {}).get("database", "(default)")
            if database not in locations:
                if target.firestore_location:
                    locations[database] = target.firestore_location
                elif reads is not None:
                    locations[database] = reads.firestore_location(database)
                else:
                    locations[database] = read_firestore_location(target.project, database)
            trigger["region"] = locations[database]
        if location == "global":
            trigger["region"] = "global"  # Firebase Alerts are published globally
    for _, endpoint in endpoints(manifest):  # after the databases: each read in turn
        if kind_of_trigger(endpoint).deploy.location == "bucket" and for_deploy:
            trigger = endpoint["eventTrigger"]
            if reads is not None and not target.bucket_location:
                trigger["region"] = reads.bucket_location(str(trigger["eventFilters"]["bucket"]))
            else:
                trigger["region"] = storage_trigger_region(trigger, target)
    return manifest


def target_manifest(target: Target) -> dict[str, Any]:
    """The checked manifest of `target.source`/main.py for `target`."""
    return deploy_manifest(sdk_manifest(target.source), target, deploy_env(target))


def firebase_manifest(target: Target) -> dict[str, Any]:
    """The manifest `make deploy-firebase` hands the Firebase CLI; `DeployError` naming each
    async function, which firebase-tools would serve with the sync server."""
    manifest = target_manifest(target)
    async_functions = [name for name, e in endpoints(manifest) if is_asgi(e)]
    if async_functions:
        raise DeployError(
            "\n".join(
                f"{name} is an async function: `make deploy-firebase` serves sync functions "
                "only; deploy it with `make deploy-gcloud` (docs/async.md)"
                for name in async_functions
            )
        )
    return manifest


# --- gcloud -------------------------------------------------------------------------------------


def signature_type(endpoint: Mapping[str, Any]) -> str:
    """How functions-framework must call the function: `cloudevent` or `http`."""
    return "cloudevent" if endpoint.get("eventTrigger") is not None else "http"


def env_kind(endpoint: Mapping[str, Any]) -> str:
    """The name of the env file a function is deployed with: its signature type, prefixed
    with `asgi-` for an async function."""
    return ("asgi-" if is_asgi(endpoint) else "") + signature_type(endpoint)


def env_files(target: Target, env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The --env-vars-file contents per `env_kind`: the env files' variables, what firebase-tools
    sets itself on every function it deploys (`GCLOUD_PROJECT`, `FUNCTION_REGION`, which
    Cloud Run functions do not set: `functions.region`), the signature type
    functions-framework must serve, and `FUNCTION_USE_ASGI=true` for an async function
    (functions-framework's `--asgi`, read from the environment by the `functions-framework`
    command the Python buildpack starts)."""
    base = {**env, "GCLOUD_PROJECT": target.project, REGION_VARIABLE: target.region}
    files = {
        "cloudevent": {**base, "FUNCTION_SIGNATURE_TYPE": "cloudevent"},
        "http": dict(base),
    }
    for kind, values in list(files.items()):
        files[f"asgi-{kind}"] = {**values, ASGI_VARIABLE: "true"}
    return files


def write_env_files(target: Target) -> list[Path]:
    """Write the files `env_files` describes under `target.env_dir`; their paths."""
    target.env_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, values in env_files(target, deploy_env(target)).items():
        path = target.env_dir / f"{kind}.env.yaml"
        path.write_text(yaml.safe_dump(values, default_flow_style=False))
        path.chmod(0o600)
        written.append(path)
    return written


def _memory(mb: int) -> str:
    return f"{mb // 1024}Gi" if mb % 1024 == 0 else f"{mb}Mi"


def runtime_flags(
    endpoint: Mapping[str, Any], secret_versions: Mapping[str, str] | None = None
) -> list[str]:
    """gcloud flags for the runtime shape the manifest declares (memory, CPU, concurrency,
    instances, timeout, ingress, labels, secrets). Each secret is mounted at the version
    `secret_versions` pins (`secret_versions_of`), as firebase-tools pins the latest version
    at deploy time."""
    flags: list[str] = []
    simple = {
        "cpu": "--cpu={}",
        "concurrency": "--concurrency={}",
        "minInstances": "--min-instances={}",
        "maxInstances": "--max-instances={}",
        "timeoutSeconds": "--timeout={}s",
    }
    if endpoint.get("availableMemoryMb") is not None:
        flags.append(f"--memory={_memory(int(endpoint['availableMemoryMb']))}")
    for key, flag in simple.items():
        value = endpoint.get(key)
        if value == "gcf_gen1":
            raise DeployError("cpu='gcf_gen1' has no gcloud equivalent: declare cpu=1 or more")
        if value is not None:
            flags.append(flag.format(value))
    ingress = endpoint.get("ingressSettings")
    if ingress is not None:
        flags.append(
            f"--ingress-settings={ingress.removeprefix('ALLOW_').lower().replace('_', '-')}"
        )
    labels = endpoint.get("labels") or {}
    if labels:
        flags.append("--update-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())))
    secrets = endpoint.get("secretEnvironmentVariables") or []
    if secrets:
        versions = secret_versions or {}
        pairs = []
        for s in secrets:
            name = s.get("secret") or s["key"]
            pairs.append(f"{s['key']}={name}:{versions.get(name, 'latest')}")
        flags.append("--set-secrets=" + ",".join(pairs))
    return flags


def trigger_flags(name: str, endpoint: Mapping[str, Any], target: Target) -> list[str]:
    """gcloud flags for the function's trigger, retry and trigger identity."""
    if "httpsTrigger" in endpoint or "callableTrigger" in endpoint:
        return ["--trigger-http", "--allow-unauthenticated"]
    if "taskQueueTrigger" in endpoint or "scheduleTrigger" in endpoint:
        return ["--trigger-http", "--no-allow-unauthenticated"]
    trigger = endpoint.get("eventTrigger")
    if trigger is None:
        kinds = sorted(k for k in endpoint if k.endswith("Trigger"))
        raise DeployError(
            f"{name} has a trigger ({', '.join(kinds) or 'unknown'}) that `make deploy-gcloud` "
            "does not deploy: deploy it with `make deploy-firebase`."
        )
    flags = [f"--trigger-service-account={target.service_account_email}"]
    if trigger.get("retry"):
        flags.append("--retry")
    deploy = kind_of_trigger(endpoint).deploy
    flags = [*deploy.gcloud_trigger(trigger), *flags]
    if not deploy.gcloud_location:
        return flags
    if deploy.location == "bucket" and not trigger.get("region"):
        return flags  # the bucket's location is put on the trigger once read (`deploy_manifest`)
    return [*flags, f"--trigger-location={trigger.get('region') or target.region}"]


def secret_names(manifest: Mapping[str, Any]) -> list[str]:
    """The secrets the functions declare, sorted."""
    return sorted(
        {
            s.get("secret") or s["key"]
            for _, e in endpoints(manifest)
            for s in e.get("secretEnvironmentVariables") or []
        }
    )


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


def secret_versions_of(
    manifest: Mapping[str, Any], target: Target, reads: DeployTimeReads | None = None
) -> dict[str, str]:
    """The version each declared secret is pinned to: `target.secret_versions`, else its latest
    enabled version, read now or, with `reads`, at deploy time. Both paths thus run with the
    version current at deploy time, and a rotated secret reaches the functions with the next
    deploy."""
    pinned = dict(target.secret_versions)
    versions = {}
    for secret in secret_names(manifest):
        if pinned.get(secret):
            versions[secret] = pinned[secret]
        elif reads is not None:
            versions[secret] = reads.secret_version(secret)
        else:
            versions[secret] = read_secret_version(target.project, secret)
    return versions


def deploy_runtime(target: Target) -> str:
    """The runtime (python313...) every path deploys to: the venv's (`tools.runtime`), refused
    with `DeployError` when firebase.json says another, before anything deploys."""
    try:
        return runtime_of_venv(target.source)
    except RuntimeMismatch as exc:
        raise DeployError(str(exc)) from None


def gcloud_deploy_commands(
    manifest: Mapping[str, Any], target: Target, reads: DeployTimeReads | None = None
) -> list[list[str]]:
    """One `gcloud functions deploy` per function of the manifest, same shape as firebase's;
    with `reads`, the secret versions not pinned are read at deploy time."""
    versions = secret_versions_of(manifest, target, reads)
    runtime = deploy_runtime(target)
    commands = []
    for name, endpoint in endpoints(manifest):
        env_file = target.env_dir / f"{env_kind(endpoint)}.env.yaml"
        commands.append(
            [
                "gcloud", "functions", "deploy", name, "--gen2", f"--runtime={runtime}",
                f"--region={endpoint['region'][0]}", f"--project={target.project}",
                "--source=.",
                f"--entry-point={endpoint['entryPoint']}",
                f"--service-account={endpoint['serviceAccountEmail']}",
                f"--env-vars-file={env_file.relative_to(target.source)}",
                *trigger_flags(name, endpoint, target),
                *runtime_flags(endpoint, versions),
                "--quiet",
            ]
        )  # fmt: skip
    return commands


# --- topics, queues, bootstrap ------------------------------------------------------------------


def _describe_or_create(describe: list[str], create: list[str]) -> str:
    """A command that keeps an existing resource and creates a missing one."""
    return f"{shlex.join(describe)} >/dev/null 2>&1 || {shlex.join(create)}"


def topics_plan(manifest: Mapping[str, Any], target: Target) -> list[str]:
    """Create the topics the triggers (and TOPICS) name; existing ones are kept."""
    topics = {t for _, e in endpoints(manifest) if (t := trigger_topic(e))}
    topics.update(target.extra_topics)
    project = f"--project={target.project}"
    return [
        _describe_or_create(
            ["gcloud", "pubsub", "topics", "describe", topic, project],
            ["gcloud", "pubsub", "topics", "create", topic, project],
        )
        for topic in sorted(topics)
    ]


QUEUE_FLAGS = {
    ("retryConfig", "maxAttempts"): "--max-attempts={}",
    ("retryConfig", "maxRetrySeconds"): "--max-retry-duration={}s",
    ("retryConfig", "minBackoffSeconds"): "--min-backoff={}s",
    ("retryConfig", "maxBackoffSeconds"): "--max-backoff={}s",
    ("retryConfig", "maxDoublings"): "--max-doublings={}",
    ("rateLimits", "maxConcurrentDispatches"): "--max-concurrent-dispatches={}",
    ("rateLimits", "maxDispatchesPerSecond"): "--max-dispatches-per-second={}",
}
"""`gcloud tasks queues create`/`update` flag for each setting of the manifest's `taskQueueTrigger`
(the decorator's `retry_config` and `rate_limits`, as firebase-tools applies them)."""


def queue_flags(trigger: Mapping[str, Any]) -> list[str]:
    """The queue's retry and rate settings declared on the task-queue decorator."""
    flags = []
    for (group, key), flag in QUEUE_FLAGS.items():
        value = (trigger.get(group) or {}).get(key)
        if value is not None:
            flags.append(flag.format(value))
    return flags


def queues_plan(manifest: Mapping[str, Any], target: Target) -> list[str]:
    """Create or update the Cloud Tasks queue of each task queue function (named after the
    function, as firebase-tools names it) with the retry and rate settings its decorator
    declares, as firebase-tools does on every deploy: an existing queue gets the declared
    settings, a missing one is created with them."""
    where = [f"--location={target.region}", f"--project={target.project}"]
    plan = []
    for name, endpoint in endpoints(manifest):
        if "taskQueueTrigger" not in endpoint:
            continue
        settings = queue_flags(endpoint["taskQueueTrigger"])
        describe = shlex.join(["gcloud", "tasks", "queues", "describe", name, *where])
        create = shlex.join(["gcloud", "tasks", "queues", "create", name, *where, *settings])
        if not settings:
            plan.append(f"{describe} >/dev/null 2>&1 || {create}")
            continue
        update = shlex.join(["gcloud", "tasks", "queues", "update", name, *where, *settings])
        plan.append(f"if {describe} >/dev/null 2>&1; then {update}; else {create}; fi")
    return plan


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


def runtime_roles(manifest: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """The project roles the runtime service account needs for these functions and settings."""
    roles = list(RUNTIME_ROLES)
    all_endpoints = [e for _, e in endpoints(manifest)]
    if any(e.get("eventTrigger") is not None for e in all_endpoints):
        roles += list(TRIGGER_ROLES)
    if any("taskQueueTrigger" in e for e in all_endpoints):
        roles.append(ENQUEUER_ROLE)
    if not env.get("NOTIFY_URL", "").strip():
        roles.append(FCM_ROLE)
    if _telemetry_on(env):
        roles += list(TELEMETRY_ROLES)
    return roles


def _telemetry_on(env: Mapping[str, str]) -> bool:
    try:
        return telemetry_enabled(env)
    except ConfigError as exc:
        raise DeployError(str(exc)) from None


def bootstrap_plan(
    manifest: Mapping[str, Any],
    target: Target,
    env: Mapping[str, str],
    reads: DeployTimeReads | None = None,
) -> list:
    """APIs, the runtime service account and exactly its roles, the service agents' roles;
    with `reads`, the project's number (when not given) is read when the plan runs."""
    project = f"--project={target.project}"
    account = target.service_account_email
    member = f"--member=serviceAccount:{account}"
    apis = list(APIS) + ([] if env.get("NOTIFY_URL", "").strip() else ["fcm.googleapis.com"])
    apis += list(TELEMETRY_APIS) if _telemetry_on(env) else []
    plan = [
        shlex.join(["gcloud", "services", "enable", *apis, project]),
        _describe_or_create(
            ["gcloud", "iam", "service-accounts", "describe", account, project],
            ["gcloud", "iam", "service-accounts", "create", account.split("@")[0],
             "--display-name=Exactly-once functions (runtime)", project],
        ),
    ]  # fmt: skip
    for role in runtime_roles(manifest, env):
        plan.append(
            shlex.join(
                ["gcloud", "projects", "add-iam-policy-binding", target.project, member,
                 f"--role={role}", "--condition=None", "--quiet"]
            ) + " >/dev/null"
        )  # fmt: skip
    for secret in secret_names(manifest):
        plan.append(
            shlex.join(
                ["gcloud", "secrets", "add-iam-policy-binding", secret, member,
                 f"--role={SECRET_ROLE}", project, "--quiet"]
            ) + " >/dev/null"
        )  # fmt: skip
    if any("taskQueueTrigger" in e for _, e in endpoints(manifest)):
        # The Admin SDK signs each task with an OIDC token for this same account: it must be
        # allowed to act as itself to create such tasks (docs/tasks.md).
        plan.append(
            shlex.join(
                ["gcloud", "iam", "service-accounts", "add-iam-policy-binding", account, member,
                 f"--role={ACT_AS_ROLE}", project, "--quiet"]
            ) + " >/dev/null"
        )  # fmt: skip
    if target.project_number:
        number = target.project_number
    elif reads is not None:
        number = reads.project_number()
    else:
        number = read_project_number(target.project)
    agent = f"service-{number}@gcp-sa-pubsub.iam.gserviceaccount.com"
    plan.append(
        shell_join(
            ["gcloud", "projects", "add-iam-policy-binding", target.project,
             f"--member=serviceAccount:{agent}", f"--role={PUBSUB_AGENT_ROLE}",
             "--condition=None", "--quiet"]
        ) + " >/dev/null"
    )  # fmt: skip
    plan += event_source_bootstrap(manifest, target, number)
    return plan


# --- deploy-time params, Storage, Firebase Alerts and schedules --------------------------------

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
_PARAM = re.compile(r"\{\{\s*params\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def default_bucket(project: str) -> str:
    """The project's default Cloud Storage bucket (Firebase projects since late 2024; an older
    project's `<project>.appspot.com` is named with UPLOAD_BUCKET in its env file)."""
    return f"{project}.firebasestorage.app"


def resolve_params(manifest: dict[str, Any], target: Target, env: Mapping[str, str]) -> None:
    """Replace each `{{ params.NAME }}` of the endpoints with its deploy-time value: the env
    files' NAME, else the declared default; an empty UPLOAD_BUCKET is the default bucket. Both
    paths thus deploy the same values, and firebase deploy has no parameter left to ask for."""
    declared = {p["name"]: p for p in manifest.pop("params", None) or []}

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in declared:
            raise DeployError(f"the manifest uses params.{name}, which no function declares")
        found = env.get(name, "").strip() or str(declared[name].get("default") or "")
        if name == BUCKET_PARAM and not found:
            return default_bucket(target.project)
        if not found:
            raise DeployError(f"{name} has no value: set it in .env or .env.{target.project}")
        return found

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return _PARAM.sub(value, node)
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    manifest["endpoints"] = walk(manifest.get("endpoints", {}))


def source_apis(endpoint: Mapping[str, Any]) -> tuple[str, ...]:
    """The extra APIs `make bootstrap` enables for a function: its kind's (`dedup.kinds`), the
    schedule's for a scheduled function; none for Firestore, Pub/Sub and task functions."""
    if "scheduleTrigger" in endpoint:
        return kinds.SCHEDULE.apis
    return kind_of_trigger(endpoint).apis


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


def storage_trigger_region(trigger: Mapping[str, Any], target: Target) -> str:
    """The bucket's location, read now; `DeployError` when REGION cannot serve it."""
    bucket = str(trigger["eventFilters"]["bucket"])
    location = (target.bucket_location or "").lower() or read_bucket_location(
        target.project, bucket
    )
    if not serves(target.region, location):
        raise DeployError(
            f"bucket {bucket} is in {location}, which REGION={target.region} cannot serve: a "
            "Storage trigger must sit in the bucket's region or inside its multi-region. "
            f"Deploy with a REGION in {location}, or name another bucket with UPLOAD_BUCKET."
        )
    return location


def event_source_bootstrap(manifest: Mapping[str, Any], target: Target, number: str) -> list:
    """The APIs the functions' kinds need (`Kind.apis`), and the role each kind's service agent
    needs to publish its events (`Deploy.service_agent`: Cloud Storage's `pubsub.publisher`)."""
    needed: list[str] = []
    agents: list[tuple[str, str]] = []
    for _, endpoint in endpoints(manifest):
        needed += [api for api in source_apis(endpoint) if api not in needed]
        agent = kind_of_trigger(endpoint).deploy.service_agent  # None without an event trigger
        if agent is not None and agent not in agents:
            agents.append(agent)
    if not needed:
        return []
    plan = [shlex.join(["gcloud", "services", "enable", *needed, f"--project={target.project}"])]
    for email, role in agents:
        member = f"serviceAccount:{email.format(number=number)}"
        plan.append(
            shell_join(
                ["gcloud", "projects", "add-iam-policy-binding", target.project,
                 f"--member={member}", f"--role={role}", "--condition=None", "--quiet"]
            ) + " >/dev/null"
        )  # fmt: skip
    return plan


def schedule_job_name(name: str, region: str) -> str:
    """The Cloud Scheduler job of a scheduled function: firebase-tools' own name for it, so
    either path updates the job the other created."""
    return f"firebase-schedule-{name}-{region}"


def schedule_flags(endpoint: Mapping[str, Any]) -> list[str]:
    """The job settings both paths give: schedule, time zone, retries, attempt deadline."""
    trigger = endpoint["scheduleTrigger"]
    timeout = int(endpoint.get("timeoutSeconds") or MIN_ATTEMPT_DEADLINE)
    deadline = max(min(timeout, MAX_ATTEMPT_DEADLINE), MIN_ATTEMPT_DEADLINE)
    flags = [
        f"--schedule={trigger['schedule']}",
        f"--time-zone={trigger.get('timeZone') or 'UTC'}",
        f"--attempt-deadline={deadline}s",
        "--http-method=POST",
    ]
    retry = trigger.get("retryConfig") or {}
    for key, flag in (
        ("retryCount", "--max-retry-attempts={}"),
        ("maxRetrySeconds", "--max-retry-duration={}s"),
        ("minBackoffSeconds", "--min-backoff={}s"),
        ("maxBackoffSeconds", "--max-backoff={}s"),
        ("maxDoublings", "--max-doublings={}"),
    ):
        if retry.get(key) is not None:
            flags.append(flag.format(retry[key]))
    return flags


def scheduler_plan(manifest: Mapping[str, Any], target: Target) -> list[str]:
    """Create or update each scheduled function's Cloud Scheduler job (after its deploy): it
    POSTs to the function's stable `cloudfunctions.net` URL (a 2nd-gen function answers there
    too, so the plan needs no look-up) with an OIDC token for the runtime service account."""
    plan = []
    for name, endpoint in endpoints(manifest):
        if "scheduleTrigger" not in endpoint:
            continue
        region = endpoint["region"][0]
        where = [f"--location={region}", f"--project={target.project}"]
        job = schedule_job_name(name, region)
        uri = f"https://{region}-{target.project}.cloudfunctions.net/{name}"  # a stable URL
        account = endpoint["serviceAccountEmail"]
        settings = [
            *schedule_flags(endpoint), f"--uri={uri}", f"--oidc-service-account-email={account}",
            f"--oidc-token-audience={uri}", "--quiet",
        ]  # fmt: skip
        describe = shlex.join(["gcloud", "scheduler", "jobs", "describe", job, *where])
        create = shlex.join(
            ["gcloud", "scheduler", "jobs", "create", "http", job, *where, *settings]
        )
        update = shlex.join(
            ["gcloud", "scheduler", "jobs", "update", "http", job, *where, *settings]
        )
        plan.append(f"if {describe} >/dev/null 2>&1; then {update}; else {create}; fi")
    return plan


# --- monitoring ---------------------------------------------------------------------------------


def outcome_log_filter(outcome: str) -> str:
    """The Cloud Logging filter of dedup's delivery lines with this outcome (`dedup.logs`:
    the JSON line lands in `jsonPayload`; every delivery line carries `key` and `suffix`)."""
    return f'jsonPayload.outcome="{outcome}" AND jsonPayload.key:* AND jsonPayload.suffix:*'


def log_metric_name(outcome: str) -> str:
    """The log-based metric counting the delivery lines of `outcome`."""
    return f"dedup_{outcome}"


def monitoring_plan(target: Target) -> list[str]:
    """Log-based metrics for `MONITORED_OUTCOMES` and an alert policy on `dead`; existing ones
    are kept (a metric by its name, the policy by its display name)."""
    project = f"--project={target.project}"
    plan = [
        _describe_or_create(
            ["gcloud", "logging", "metrics", "describe", log_metric_name(outcome), project],
            ["gcloud", "logging", "metrics", "create", log_metric_name(outcome), project,
             f"--description=dedup deliveries whose outcome is {outcome}: {why}",
             f"--log-filter={outcome_log_filter(outcome)}"],
        )
        for outcome, why in MONITORED_OUTCOMES.items()
    ]  # fmt: skip
    metric = f"logging.googleapis.com/user/{log_metric_name(ALERTED_OUTCOME)}"
    aggregation = (
        '{"alignmentPeriod": "60s", "perSeriesAligner": "ALIGN_SUM", '
        '"crossSeriesReducer": "REDUCE_SUM"}'
    )
    channels = [f"--notification-channels={','.join(target.alert_channels)}"]
    create = [
        "gcloud", "alpha", "monitoring", "policies", "create", project,
        f"--display-name={ALERT_POLICY_NAME}",
        "--condition-display-name=an event was given up (dedup outcome dead)",
        f'--condition-filter=metric.type="{metric}" AND resource.type="cloud_run_revision"',
        f"--aggregation={aggregation}", "--if=> 0", "--duration=0s", "--trigger-count=1",
        "--combiner=OR",
        "--documentation=A delivery reached max_attempts and its record is dead: the effect "
        "of the event never happened. Find it in Logs Explorer with "
        f"`{outcome_log_filter(ALERTED_OUTCOME)}`, fix the cause, then `dedup revive --state "
        "dead --suffix SUFFIX` (docs/operations.md).",
        *(channels if target.alert_channels else []),
        "--quiet",
    ]  # fmt: skip
    listing = [
        "gcloud", "alpha", "monitoring", "policies", "list", project,
        f'--filter=displayName="{ALERT_POLICY_NAME}"', "--format=value(name)",
    ]  # fmt: skip
    plan.append(f"{shlex.join(listing)} | grep -q . || {shlex.join(create)}")
    return plan


def plan(what: str, target: Target) -> list[str]:
    """The shell commands of `make WHAT`, in order, for the firebase and gcloud paths (the Cloud
    Run path's: `tools.deploy_run.plan`; `python -m tools.deploy plan` chooses)."""
    if what == "monitoring":
        return monitoring_plan(target)
    env = deploy_env(target)
    for_deploy = what == "deploy-gcloud"
    reads = DeployTimeReads(target)
    manifest = deploy_manifest(
        sdk_manifest(target.source), target, env, for_deploy=for_deploy, reads=reads
    )
    if what == "deploy-gcloud":
        deploys = [shell_join(c) for c in gcloud_deploy_commands(manifest, target, reads)]
        return reads.plan() + deploys + scheduler_plan(manifest, target)
    if what == "topics":
        return topics_plan(manifest, target)
    if what == "queues":
        return queues_plan(manifest, target)
    if what == "bootstrap":
        commands = bootstrap_plan(manifest, target, env, reads)
        return reads.plan() + commands
    raise DeployError(
        f"unknown plan {what!r}: deploy-gcloud, deploy-run, bootstrap, bootstrap-run, topics, "
        "queues or monitoring"
    )
