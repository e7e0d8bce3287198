"""The Cloud Run functions path: `make deploy-run`, from the manifest the other paths deploy.

    venv/bin/python -m tools.deploy plan deploy-run OPTIONS [--make]    # the plan (Makefile)
    venv/bin/python -m tools.deploy plan bootstrap-run OPTIONS [--make] # what bootstrap adds
    venv/bin/python -m tools.deploy_run env-files --project=P --region=R  # the env files
    venv/bin/python -m tools.deploy_run check-names --project=P --region=R --project-number=N

Every function `main.py` exports becomes one Cloud Run service (`gcloud run deploy SERVICE
--source=. --function=ENTRY --base-image=RUNTIME`, the buildpack and upload of `gcloud functions
deploy`); what Cloud Functions wired is wired here, after the deploys:

* an event function: an Eventarc trigger to its service, whose Pub/Sub subscription gets the
  settings of `tools.run_service` (ack deadline, backoff, a dead-letter topic with a
  subscription on it after `delivery_attempts`), and records kept past their dead letters;
* a scheduled function: its Cloud Scheduler job, POSTing to the service's `run.app` URL with an
  OIDC token;
* a task-queue function: its queue routed to the service's `run.app` URL (`--http-uri-override`
  with an OIDC override), so the tasks the template enqueues reach it;
* an HTTP or callable function: public, as on the other paths; its URL is printed.

Before the deploys, Cloud Build's account is asked of it and granted `roles/run.builder`
(`tools.run_build`, as `make bootstrap` does).

Values only the project knows are read when the plan runs
(`tools.deploy.target.DeployTimeReads`): `make -n deploy-run` prints the whole plan with no
account (docs/deploy.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from dedup.config import DedupConfig
from dedup.errors import ConfigError
from dedup.platform.run_names import run_app_url
from tools.deploy.gcloud import (
    deploy_runtime,
    env_file,
    runtime_flags,
    schedule_flags,
    schedule_job_name,
    secret_versions_of,
)
from tools.deploy.manifest import (
    deploy_env,
    deploy_manifest,
    endpoints,
    kind_of_trigger,
    sdk_manifest,
    trigger_topic,
)
from tools.deploy.project import queue_flags
from tools.deploy.target import DeployError, DeployTimeReads, Target, _python, refused, shell_join
from tools.run_build import builder_grant
from tools.run_service import (
    MAX_RETRY_DELAY,
    MIN_RETRY_DELAY,
    ack_deadline,
    dead_letter_subscription,
    dead_letter_topic,
    delivery_attempts,
    event_retention,
    refuse_unreachable_services,
    run_env_dir,
    run_function_env_files,
    service_names,
    write_run_env_files,
)

PROTOBUF = "application/protobuf"
"""The data content type of Firestore's events, as firebase-functions reads them."""
PUBSUB_AGENT = "service-{number}@gcp-sa-pubsub.iam.gserviceaccount.com"
"""The Pub/Sub service agent: it publishes to the dead-letter topic and acks the source."""
RUN_APIS = (
    "run.googleapis.com",
    "eventarc.googleapis.com",
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "pubsub.googleapis.com",
)
"""The APIs this path needs (`make bootstrap` enables them)."""
RUN_PLANS = ("deploy-run", "bootstrap-run", "run-names")  # `python -m tools.deploy plan` sends them


def base_image(target: Target) -> str:
    """The buildpack's base image: the runtime every path deploys to, the venv's Python's
    (`tools.deploy.gcloud.deploy_runtime`); `DeployError` when firebase.json says another."""
    return deploy_runtime(target)


def run_flags(endpoint: Mapping[str, Any], versions: Mapping[str, str]) -> list[str]:
    """The runtime shape of `tools.deploy.gcloud.runtime_flags`, in `gcloud run deploy`'s words."""
    flags = []
    for flag in runtime_flags(endpoint, versions):
        if flag.startswith("--ingress-settings="):
            flag = "--ingress=" + flag.partition("=")[2].replace("gclb", "cloud-load-balancing")
        flags.append(flag)
    return flags


def is_public(endpoint: Mapping[str, Any]) -> bool:
    """HTTP and callable functions answer anyone, as on the other paths."""
    return "httpsTrigger" in endpoint or "callableTrigger" in endpoint


def deploy_command(
    function: str, endpoint: Mapping[str, Any], service: str, target: Target,
    versions: Mapping[str, str],
) -> list[str]:  # fmt: skip
    """`gcloud run deploy` of one function."""
    if not is_public(endpoint) and not any(
        k in endpoint for k in ("eventTrigger", "taskQueueTrigger", "scheduleTrigger")
    ):
        kinds = sorted(k for k in endpoint if k.endswith("Trigger"))
        raise DeployError(
            f"{function} has a trigger ({', '.join(kinds) or 'unknown'}) that `make deploy-run` "
            "does not deploy: deploy it with `make deploy-firebase`."
        )
    variables = env_file(run_env_dir(target), function)
    access = "--allow-unauthenticated" if is_public(endpoint) else "--no-allow-unauthenticated"
    return [
        "gcloud", "run", "deploy", service, "--source=.",
        f"--function={endpoint.get('entryPoint') or function}",
        f"--base-image={base_image(target)}",
        f"--region={endpoint['region'][0]}", f"--project={target.project}",
        f"--service-account={endpoint['serviceAccountEmail']}",
        f"--env-vars-file={variables.relative_to(target.source)}",
        access, *run_flags(endpoint, versions), "--quiet",
    ]  # fmt: skip


def event_filters(trigger: Mapping[str, Any]) -> list[str]:
    """Eventarc's `--event-filters` of a trigger: its type, each filter (a Pub/Sub trigger's
    topic is its transport instead) and each path pattern."""
    flags = [f"--event-filters=type={trigger['eventType']}"]
    is_pubsub = str(trigger["eventType"]).startswith("google.cloud.pubsub.")
    for key, value in sorted((trigger.get("eventFilters") or {}).items()):
        if not (is_pubsub and key == "topic"):
            flags.append(f"--event-filters={key}={value}")
    for key, value in sorted((trigger.get("eventFilterPathPatterns") or {}).items()):
        flags.append(f"--event-filters-path-pattern={key}={value}")
    return flags


def trigger_location(endpoint: Mapping[str, Any], target: Target) -> str:
    """Where the Eventarc trigger sits: the database's or the bucket's location, `global`
    (Firebase Alerts), else the region (`tools.deploy.manifest.deploy_manifest` put it on the
    trigger)."""
    trigger = endpoint["eventTrigger"]
    if kind_of_trigger(endpoint).deploy.location == "region":
        return target.region
    return str(trigger.get("region") or target.region)


def _either(describe: list[str], update: list[str], create: list[str]) -> str:
    """Update the resource `describe` finds, else create it."""
    return (
        f"if {shell_join(describe)} >/dev/null 2>&1; then {shell_join(update)}; "
        f"else {shell_join(create)}; fi"
    )


def _quiet(command: list[str]) -> str:
    return shell_join(command) + " >/dev/null"


def event_plan(
    function: str, endpoint: Mapping[str, Any], service: str, target: Target,
    env: Mapping[str, str], number: str,
) -> list[str]:  # fmt: skip
    """The trigger of one event function, its subscription's settings and its dead letters
    (`DeployError` when `env` keeps records shorter: `tools.run_service.event_retention`)."""
    event_retention(env)
    trigger = endpoint["eventTrigger"]
    timeout = int(endpoint["timeoutSeconds"])
    deadline = ack_deadline(function, timeout)
    try:
        config = DedupConfig.from_env(env)
        config.check_lease_covers(timeout)
    except ConfigError as exc:
        raise DeployError(f"{function} (timeout {timeout} s): {exc}") from None
    attempts = delivery_attempts(config.lease_seconds, timeout, config.max_attempts)
    project = f"--project={target.project}"
    where = [f"--location={trigger_location(endpoint, target)}", project]
    account = f"--service-account={endpoint['serviceAccountEmail']}"
    destination = [
        f"--destination-run-service={service}",
        f"--destination-run-region={target.region}",
    ]
    filters = event_filters(trigger)
    content = [f"--event-data-content-type={PROTOBUF}"] if _is_firestore(endpoint) else []
    extra = []
    topic = trigger_topic(endpoint)
    if topic is not None:
        extra.append(f"--transport-topic=projects/{target.project}/topics/{topic}")
    if trigger.get("channel"):
        extra.append(f"--channel={trigger['channel']}")
    plan = [
        _either(
            ["gcloud", "eventarc", "triggers", "describe", service, *where],
            ["gcloud", "eventarc", "triggers", "update", service, *where, *destination,
             *filters, *content, account, "--quiet"],
            ["gcloud", "eventarc", "triggers", "create", service, *where, *destination,
             *filters, *content, *extra, account, "--quiet"],
        ),
    ]  # fmt: skip
    subscription = shell_join(
        ["gcloud", "eventarc", "triggers", "describe", service, *where,
         "--format=value(transport.pubsub.subscription)"]
    )  # fmt: skip
    dead = dead_letter_topic(service)
    agent = f"--member=serviceAccount:{PUBSUB_AGENT.format(number=number)}"
    topic_check = ["gcloud", "pubsub", "topics", "describe", dead, project]
    topic_create = ["gcloud", "pubsub", "topics", "create", dead, project]
    reader_check = ["gcloud", "pubsub", "subscriptions", "describe", dead, project]
    reader_create = dead_letter_subscription(dead, project)
    publisher = [
        "gcloud", "pubsub", "topics", "add-iam-policy-binding", dead, agent,
        "--role=roles/pubsub.publisher", project,
    ]  # fmt: skip
    policy = [
        project, f"--ack-deadline={deadline}", f"--min-retry-delay={MIN_RETRY_DELAY}s",
        f"--max-retry-delay={MAX_RETRY_DELAY}s",
        f"--dead-letter-topic=projects/{target.project}/topics/{dead}",
        f"--max-delivery-attempts={attempts}", "--quiet",
    ]  # fmt: skip
    on_subscription = f'gcloud pubsub subscriptions {{}} "$({subscription})" '
    plan += [
        f"{shell_join(topic_check)} >/dev/null 2>&1 || {shell_join(topic_create)}",
        f"{shell_join(reader_check)} >/dev/null 2>&1 || {shell_join(reader_create)}",
        _quiet(publisher),
        on_subscription.format("add-iam-policy-binding")
        + shell_join([agent, "--role=roles/pubsub.subscriber", project])
        + " >/dev/null",
        on_subscription.format("update") + shell_join(policy),
    ]
    return plan


def _is_firestore(endpoint: Mapping[str, Any]) -> bool:
    return kind_of_trigger(endpoint).deploy.location == "database"


def invoker_binding(service: str, target: Target, member: str) -> str:
    """`roles/run.invoker` on one service for `member`."""
    return _quiet(
        ["gcloud", "run", "services", "add-iam-policy-binding", service,
         f"--region={target.region}", f"--project={target.project}", f"--member={member}",
         "--role=roles/run.invoker", "--quiet"]
    )  # fmt: skip


def schedule_command(function: str, endpoint: Mapping[str, Any], url: str, target: Target) -> str:
    """Create or update the Cloud Scheduler job (the name firebase-tools gives it) to POST to
    the service with an OIDC token for the runtime account."""
    where = [f"--location={target.region}", f"--project={target.project}"]
    job = schedule_job_name(function, target.region)
    settings = [
        *schedule_flags(endpoint), f"--uri={url}",
        f"--oidc-service-account-email={endpoint['serviceAccountEmail']}",
        f"--oidc-token-audience={url}", "--quiet",
    ]  # fmt: skip
    return _either(
        ["gcloud", "scheduler", "jobs", "describe", job, *where],
        ["gcloud", "scheduler", "jobs", "update", "http", job, *where, *settings],
        ["gcloud", "scheduler", "jobs", "create", "http", job, *where, *settings],
    )


def queue_command(
    function: str, endpoint: Mapping[str, Any], service: str, url: str, target: Target
) -> str:
    """Route the function's queue (`make queues` created it) to the service: every task,
    whatever URL its enqueuer put on it, is sent to the `run.app` URL with an OIDC token."""
    host = url.removeprefix("https://")
    return shell_join(
        ["gcloud", "tasks", "queues", "update", function, f"--location={target.region}",
         f"--project={target.project}", *queue_flags(endpoint["taskQueueTrigger"]),
         f"--http-uri-override=scheme:https,host:{host},path:/",
         f"--http-oidc-service-account-email-override={endpoint['serviceAccountEmail']}",
         f"--http-oidc-token-audience-override={url}", "--quiet"]
    )  # fmt: skip


def project_number(target: Target, reads: DeployTimeReads) -> str:
    """PROJECT_NUMBER, else read when the plan runs."""
    return target.project_number or reads.project_number()


def deploy_plan(target: Target) -> list[str]:
    """The commands of `make deploy-run`, in order (see the module docstring)."""
    env = deploy_env(target)
    reads = DeployTimeReads(target)
    manifest = deploy_manifest(sdk_manifest(target.source), target, env, reads=reads)
    services = service_names(manifest)
    versions = secret_versions_of(manifest, target, reads)
    number = project_number(target, reads)
    if target.project_number:  # else `names_plan` checked it with the number it read
        refuse_unreachable_services(services, target.project_number)
    env_files_command = shell_join(
        [_python(), "-m", "tools.deploy_run", "env-files", f"--project={target.project}",
         f"--region={target.region}", f"--project-number={number}"]
    )  # fmt: skip
    deploys, after, urls = [], [], []
    member = f"serviceAccount:{target.service_account_email}"
    for function, endpoint in endpoints(manifest):
        service = services[function]
        deploys.append(shell_join(deploy_command(function, endpoint, service, target, versions)))
        url = run_app_url(service, target.region, number)
        if is_public(endpoint):
            urls.append(shell_join(["echo", f"{function}: {url}"]))
            continue
        after.append(invoker_binding(service, target, member))
        if endpoint.get("eventTrigger") is not None:
            after += event_plan(function, endpoint, service, target, env, number)
        elif "scheduleTrigger" in endpoint:
            after.append(schedule_command(function, endpoint, url, target))
        elif "taskQueueTrigger" in endpoint:
            after.append(queue_command(function, endpoint, service, url, target))
    return [*reads.plan(), *builder_grant(target), env_files_command, *deploys, *after, *urls]


def bootstrap_plan(target: Target) -> list[str]:
    """What `make bootstrap` adds for this path: its APIs, then `roles/run.builder` for the
    account Cloud Build says it builds with (`tools.run_build`: asked once the APIs are on). The
    runtime account's `run.invoker` (as trigger, scheduler and task identity) is granted per
    service by the deploy, on the services it calls only."""
    enable = ["gcloud", "services", "enable", *RUN_APIS, f"--project={target.project}"]
    return [shell_join(enable), *builder_grant(target)]


def names_plan(target: Target) -> list[str]:
    """What `make deploy-run` runs first: nothing when the project's number is given and every
    service's `run.app` URL can exist (`DeployError` when one cannot, so nothing runs); else the
    read of the number and the same check with it (`check-names`), before any other command."""
    services = service_names(sdk_manifest(target.source))
    if target.project_number:
        refuse_unreachable_services(services, target.project_number)
        return []
    reads = DeployTimeReads(target)
    check = [
        _python(), "-m", "tools.deploy_run", "check-names", f"--project={target.project}",
        f"--region={target.region}", f"--project-number={reads.project_number()}",
    ]  # fmt: skip
    return [*reads.plan(), shell_join(check)]


def plan(what: str, target: Target) -> list[str]:
    """The shell commands of a plan of this path (`RUN_PLANS`)."""
    if what == "deploy-run":
        return deploy_plan(target)
    if what == "bootstrap-run":
        return bootstrap_plan(target)
    if what == "run-names":
        return names_plan(target)
    raise DeployError(f"unknown plan {what!r}: {' or '.join(RUN_PLANS)}")


def service_environment(function: str, target: Target) -> dict[str, str]:
    """Exactly what the plan gives `function`'s service: its env file's variables (its
    deployed timeout among them), and `FUNCTION_TARGET` from its `--function` (what the
    buildpack sets)."""
    manifest = deploy_manifest(
        sdk_manifest(target.source), target, deploy_env(target), for_deploy=False
    )
    endpoint = dict(endpoints(manifest))[function]
    values = run_function_env_files(target, manifest)[function]
    command = deploy_command(function, endpoint, service_names(manifest)[function], target, {})
    entry = next(w for w in command if w.startswith("--function=")).partition("=")[2]
    return {**values, "FUNCTION_TARGET": entry}


def main(argv: Sequence[str]) -> int:
    """`env-files`: write this path's env files; `check-names`: refuse a service whose `run.app`
    URL cannot exist in the project numbered `--project-number`. Errors are lines on stderr,
    status 2."""
    parser = argparse.ArgumentParser(prog="python -m tools.deploy_run")
    parser.add_argument("command", choices=["env-files", "check-names"])
    parser.add_argument("--project", required=True)
    parser.add_argument("--region", required=True)
    parser.add_argument("--project-number", default=None)
    args = parser.parse_args(argv)
    target = Target(project=args.project, region=args.region, project_number=args.project_number)
    try:
        if args.command == "check-names":
            services = service_names(sdk_manifest(target.source))
            refuse_unreachable_services(services, args.project_number or "")
            return 0
        for path in write_run_env_files(target):
            print(f"wrote {path}")
    except DeployError as problem:
        return refused(problem)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
