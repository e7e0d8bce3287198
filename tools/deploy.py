"""Deployment plans for the Makefile, all built from the one manifest `main.py` declares.

    venv/bin/python -m tools.deploy manifest [OUT] [OPTIONS]   # functions.yaml for firebase
    venv/bin/python -m tools.deploy env-files OPTIONS          # gcloud's --env-vars-file files
    venv/bin/python -m tools.deploy plan WHAT OPTIONS [--make] # shell commands, one per line
        WHAT: deploy-gcloud | bootstrap | topics | queues | monitoring
    OPTIONS: --project=P --region=R [--firestore-location=L] [--service-account=NAME]
             [--project-number=N] [--topics="a b"] [--alert-channels="c1 c2"]

`make deploy-firebase`, `make deploy-gcloud`, `make bootstrap`, `make topics`, `make queues` and
`make monitoring` call these; `make -n TARGET` prints the planned commands (with `--make` the
plan is one line that the Makefile splits back into recipe lines). See docs/deploy.md for the
first deploy, docs/observability.md for `make monitoring`.

The manifest is the SDK's own (firebase-functions builds it from `main.py`, runtime shape
included), completed with what depends on the target project:

* `retry: true` on every event trigger: firebase-functions-python writes `retry: false` for
  Firestore triggers (firebase/firebase-functions-python#165), and without retries a released
  lease is never retried. The Firebase CLI reads a static `functions.yaml` in the source folder
  instead of asking the SDK, so `make deploy-firebase` writes this one, deploys, and removes it.
* `region: [REGION]` on every function, and the Firestore database's location on every
  Firestore trigger (`--firestore-location`, else read with `gcloud firestore databases
  describe`; a multi-region database such as nam5 or eur3 keeps its own name).
* the runtime service account (`make bootstrap` creates it) on every function.

Before anything is planned, every function's timeout is checked against the dedup lease of the
env files both paths deploy (`.env`, then `.env.<project>`, read as Firebase reads them):
`DedupConfig.from_env(..., function_timeout_seconds=...)` refuses a lease shorter than
timeout + DEDUP_RPC_TIMEOUT_SECONDS, and a misspelled DEDUP_* variable.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dedup.config import DedupConfig, telemetry_enabled
from dedup.errors import ConfigError
from tools import firebase_dotenv
from tools.emulators import GENERATED_MANIFEST_MARK

ROOT = Path(__file__).resolve().parent.parent

GENERATED = f"{GENERATED_MANIFEST_MARK} for `make deploy-firebase`, which deletes it after.\n"
"""First line of the manifest it writes; `tools/emulators.py` removes a leftover with it."""
MANIFEST_FILE = "functions.yaml"
DEFAULT_SERVICE_ACCOUNT = "exactly-once-fn"
FIRESTORE_EVENT = "google.cloud.firestore.document.v1."
PUBSUB_EVENT = "google.cloud.pubsub.topic.v1.messagePublished"
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
    "roles/datastore.user": "Firestore: the dedup records and the functions' documents",
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
    "dead": "gave up after max_attempts, the effect never happened",
    "lease_lost": "a delivery outlived its lease and another took it over",
    "payload_mismatch": "an event id was reused for a different payload",
    "failed": "the handler raised TerminalError (or Firestore refused its data)",
}
"""Outcomes (the `outcome` field of dedup's log line) `make monitoring` counts, one log-based
metric each, named `dedup_<outcome>`."""
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


# --- the manifest -------------------------------------------------------------------------------


def sdk_manifest(source: Path = ROOT) -> dict[str, Any]:
    """The manifest firebase-functions builds from `source`/main.py, as a dict. main.py is
    imported as for no function in particular: an inherited FUNCTION_TARGET (a shell, a test
    that served a function) would run that function's start-up checks, which need its
    runtime settings (NOTIFY_URL, SEARCH_INDEX_URL...), not the deploy's."""
    from firebase_functions.private.serving import functions_as_yaml, get_functions

    cwd = Path.cwd()
    target = os.environ.pop("FUNCTION_TARGET", None)
    os.chdir(source)  # get_functions() imports ./main.py
    try:
        return dict(yaml.safe_load(functions_as_yaml(get_functions())))
    finally:
        os.chdir(cwd)
        if target is not None:
            os.environ["FUNCTION_TARGET"] = target


def endpoints(manifest: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(function name, endpoint) pairs of a manifest, in name order."""
    yield from sorted(manifest.get("endpoints", {}).items())


def is_firestore(endpoint: Mapping[str, Any]) -> bool:
    """True for a Firestore document trigger."""
    trigger = endpoint.get("eventTrigger") or {}
    return str(trigger.get("eventType", "")).startswith(FIRESTORE_EVENT)


def trigger_topic(endpoint: Mapping[str, Any]) -> str | None:
    """The topic id of a Pub/Sub trigger, else None."""
    trigger = endpoint.get("eventTrigger") or {}
    if trigger.get("eventType") != PUBSUB_EVENT:
        return None
    return str(trigger["eventFilters"]["topic"]).rsplit("/", 1)[-1]


def gcloud_error(stderr: str) -> str:
    """The line of gcloud's stderr that says what went wrong."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("ERROR")), lines[0] if lines else "?")


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
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    except OSError:
        raise DeployError(f"gcloud is not installed, so the location of Firestore database "
                          f"{database} of {project} cannot be read. {how}") from None  # fmt: skip
    location = done.stdout.strip()
    if done.returncode != 0 or not location:
        why = gcloud_error(done.stderr)
        raise DeployError(
            f"could not read the location of Firestore database {database} of {project} "
            f"(`{shlex.join(command)}`: {why}). {how}"
        )
    return location


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
                f"{name} declares no timeout: set timeout_sec in main.py's "
                "options.set_global_options(...) or in the function's decorator."
            )
        try:
            DedupConfig.from_env(env, function_timeout_seconds=timeout)
        except ConfigError as exc:
            raise DeployError(f"{name} (timeout {timeout} s): {exc}") from None


def deploy_manifest(
    sdk: Mapping[str, Any], target: Target, env: Mapping[str, str], *, for_deploy: bool = True
) -> dict[str, Any]:
    """The SDK's manifest completed for `target` (see the module docstring). `for_deploy`: check
    the timeouts first and put the database's location on the Firestore triggers (the other
    plans need neither)."""
    if for_deploy:
        check_timeouts(sdk, env)
    manifest = yaml.safe_load(yaml.safe_dump(dict(sdk)))  # a deep copy
    locations: dict[str, str] = {}
    for _, endpoint in endpoints(manifest):
        endpoint["region"] = [target.region]
        endpoint["serviceAccountEmail"] = target.service_account_email
        trigger = endpoint.get("eventTrigger")
        if trigger is None:
            continue
        trigger["retry"] = True
        if is_firestore(endpoint) and for_deploy:
            database = trigger.get("eventFilters", {}).get("database", "(default)")
            if database not in locations:
                locations[database] = target.firestore_location or read_firestore_location(
                    target.project, database
                )
            trigger["region"] = locations[database]
    return manifest


def target_manifest(target: Target) -> dict[str, Any]:
    """The checked manifest of `target.source`/main.py for `target`."""
    return deploy_manifest(sdk_manifest(target.source), target, deploy_env(target))


# --- gcloud -------------------------------------------------------------------------------------


def signature_type(endpoint: Mapping[str, Any]) -> str:
    """How functions-framework must call the function: `cloudevent` or `http`."""
    return "cloudevent" if endpoint.get("eventTrigger") is not None else "http"


def env_files(target: Target, env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The --env-vars-file contents per signature type: the env files' variables, the project
    (which firebase sets itself) and the signature type functions-framework must serve."""
    base = {**env, "GCLOUD_PROJECT": target.project}
    return {
        "cloudevent": {**base, "FUNCTION_SIGNATURE_TYPE": "cloudevent"},
        "http": dict(base),
    }


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


def runtime_flags(endpoint: Mapping[str, Any]) -> list[str]:
    """gcloud flags for the runtime shape the manifest declares (memory, CPU, concurrency,
    instances, timeout, ingress, labels, secrets)."""
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
        pairs = [f"{s['key']}={s.get('secret') or s['key']}:latest" for s in secrets]
        flags.append("--set-secrets=" + ",".join(pairs))
    return flags


def trigger_flags(name: str, endpoint: Mapping[str, Any], target: Target) -> list[str]:
    """gcloud flags for the function's trigger, retry and trigger identity."""
    if "httpsTrigger" in endpoint or "callableTrigger" in endpoint:
        return ["--trigger-http", "--allow-unauthenticated"]
    if "taskQueueTrigger" in endpoint:
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
    topic = trigger_topic(endpoint)
    if topic is not None:
        return [f"--trigger-topic={topic}", *flags]
    flags.append(f"--trigger-event-filters=type={trigger['eventType']}")
    for key, value in sorted((trigger.get("eventFilters") or {}).items()):
        flags.append(f"--trigger-event-filters={key}={value}")
    for key, value in sorted((trigger.get("eventFilterPathPatterns") or {}).items()):
        flags.append(f"--trigger-event-filters-path-pattern={key}={value}")
    location = trigger.get("region") or target.region
    return [*flags, f"--trigger-location={location}"]


def gcloud_deploy_commands(manifest: Mapping[str, Any], target: Target) -> list[list[str]]:
    """One `gcloud functions deploy` per function of the manifest, same shape as firebase's."""
    commands = []
    for name, endpoint in endpoints(manifest):
        env_file = target.env_dir / f"{signature_type(endpoint)}.env.yaml"
        commands.append(
            [
                "gcloud", "functions", "deploy", name, "--gen2", "--runtime=python312",
                f"--region={endpoint['region'][0]}", f"--project={target.project}",
                "--source=.",
                f"--entry-point={endpoint['entryPoint']}",
                f"--service-account={endpoint['serviceAccountEmail']}",
                f"--env-vars-file={env_file.relative_to(target.source)}",
                *trigger_flags(name, endpoint, target),
                *runtime_flags(endpoint),
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
"""`gcloud tasks queues create` flag for each setting of the manifest's `taskQueueTrigger`
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
    """Create the Cloud Tasks queue of each task queue function (named after the function, as
    firebase-tools names it), with the retry and rate settings its decorator declares; existing
    ones are kept as they are."""
    where = [f"--location={target.region}", f"--project={target.project}"]
    plan = []
    for name, endpoint in endpoints(manifest):
        if "taskQueueTrigger" in endpoint:
            settings = queue_flags(endpoint["taskQueueTrigger"])
            plan.append(
                _describe_or_create(
                    ["gcloud", "tasks", "queues", "describe", name, *where],
                    ["gcloud", "tasks", "queues", "create", name, *where, *settings],
                )
            )
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


def bootstrap_plan(manifest: Mapping[str, Any], target: Target, env: Mapping[str, str]) -> list:
    """APIs, the runtime service account and exactly its roles, the service agents' roles."""
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
    secrets = sorted(
        {
            s.get("secret") or s["key"]
            for _, e in endpoints(manifest)
            for s in e.get("secretEnvironmentVariables") or []
        }
    )
    for secret in secrets:
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
    number = target.project_number or read_project_number(target.project)
    agent = f"service-{number}@gcp-sa-pubsub.iam.gserviceaccount.com"
    plan.append(
        shlex.join(
            ["gcloud", "projects", "add-iam-policy-binding", target.project,
             f"--member=serviceAccount:{agent}", f"--role={PUBSUB_AGENT_ROLE}",
             "--condition=None", "--quiet"]
        ) + " >/dev/null"
    )  # fmt: skip
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
    """The shell commands of `make WHAT`, in order."""
    if what == "monitoring":
        return monitoring_plan(target)
    env = deploy_env(target)
    for_deploy = what == "deploy-gcloud"
    manifest = deploy_manifest(sdk_manifest(target.source), target, env, for_deploy=for_deploy)
    if what == "deploy-gcloud":
        return [shlex.join(c) for c in gcloud_deploy_commands(manifest, target)]
    if what == "topics":
        return topics_plan(manifest, target)
    if what == "queues":
        return queues_plan(manifest, target)
    if what == "bootstrap":
        return bootstrap_plan(manifest, target, env)
    raise DeployError(
        f"unknown plan {what!r}: deploy-gcloud, bootstrap, topics, queues or monitoring"
    )


# --- command line -------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.deploy", description=__doc__.split("\n")[0]
    )
    parser.add_argument("command", choices=["manifest", "env-files", "plan"])
    parser.add_argument("what", nargs="?", help="manifest: output file; plan: what to plan")
    parser.add_argument("--project", required=True)
    parser.add_argument("--region", required=True)
    parser.add_argument("--firestore-location", default="")
    parser.add_argument("--service-account", default=DEFAULT_SERVICE_ACCOUNT)
    parser.add_argument("--project-number", default="")
    parser.add_argument("--topics", default="", help="extra topics, space-separated")
    parser.add_argument(
        "--alert-channels", default="", help="monitoring: notification channels, space-separated"
    )
    parser.add_argument("--make", action="store_true", help="plan as one line, ' ;; '-separated")
    return parser


def main(argv: Sequence[str]) -> int:
    """Entry point; see the module docstring. Errors are one line on stderr, exit status 2."""
    args = _parser().parse_args(argv)
    target = Target(
        project=args.project,
        region=args.region,
        firestore_location=args.firestore_location or None,
        service_account=args.service_account or DEFAULT_SERVICE_ACCOUNT,
        project_number=args.project_number or None,
        extra_topics=tuple(args.topics.split()),
        alert_channels=tuple(args.alert_channels.split()),
    )
    try:
        if args.command == "manifest":
            text = GENERATED + yaml.safe_dump(target_manifest(target), sort_keys=False)
            if args.what:
                Path(args.what).write_text(text)
            else:
                sys.stdout.write(text)
        elif args.command == "env-files":
            for path in write_env_files(target):
                print(f"wrote {path.relative_to(target.source)}")
        else:
            commands = plan(args.what or "", target)
            print(" ;; ".join(commands) if args.make else "\n".join(commands))
    except DeployError as problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
