"""What a project needs around its functions: topics, queues, and the bootstrap (APIs,
the runtime service account, its roles, the event sources' service agents)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from dedup.cli.setup import RECORDS_ROLES
from dedup.config import telemetry_enabled
from dedup.errors import ConfigError
from tools.deploy.gcloud import secret_names
from tools.deploy.manifest import endpoints, kind_of_trigger, source_apis, trigger_topic
from tools.deploy.target import (
    DeployError,
    DeployTimeReads,
    Target,
    read_project_number,
    shell_join,
)

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
