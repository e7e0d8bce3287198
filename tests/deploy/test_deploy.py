"""Deployment without a cloud: what `firebase deploy` would read, and what gcloud would be told.

Expectations come from main.py itself (each exported function's firebase-functions endpoint),
so a function added there is checked like the samples. The manifest is the one
`make deploy-firebase` hands the Firebase CLI; the gcloud commands are the ones `make -n` prints,
each run against the installed gcloud with no credentials, which parses every argument before it
asks for an account.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import ROOT, add_function

REGION = "europe-west1"
LOCATION = "nam5"  # a multi-region database: its name, not REGION, goes on Firestore triggers
PROJECT = "demo-parse-only"
FIRESTORE_PREFIX = "google.cloud.firestore.document.v1."
PUBSUB_PUBLISHED = "google.cloud.pubsub.topic.v1.messagePublished"
WHERE = [f"--project={PROJECT}", f"--region={REGION}"]
BUCKET_LOCATION = "EU"  # a multi-region that REGION serves; gcloud prints it in upper case
BUCKET = f"{PROJECT}.firebasestorage.app"  # the default bucket, UPLOAD_BUCKET being unset
STORAGE_FINALIZED = "google.cloud.storage.object.v1.finalized"
ALERT_PUBLISHED = "google.firebase.firebasealerts.alerts.v1.published"
MAKE_VARS = [f"PROJECT={PROJECT}", f"REGION={REGION}", f"FIRESTORE_LOCATION={LOCATION}",
             "PROJECT_NUMBER=123456789012", f"BUCKET_LOCATION={BUCKET_LOCATION}"]  # fmt: skip
SHAPE_FLAGS = [
    ("cpu", "--cpu"),
    ("concurrency", "--concurrency"),
    ("minInstances", "--min-instances"),
    ("maxInstances", "--max-instances"),
]
needs_gcloud = pytest.mark.skipif(
    shutil.which("gcloud") is None,
    reason="the Google Cloud CLI (optional, for make deploy-gcloud) is not installed here",
)


@cache
def declared_functions(project: Path) -> dict[str, dict[str, Any]]:
    """Name -> endpoint (trigger, timeout...) of every function main.py exports, as the SDK
    declares it, read in a fresh process from `project`."""
    code = (
        "import json, main\n"
        "print(json.dumps({n: getattr(main, n).__firebase_endpoint__.__dict__ "
        "for n in main.__all__}, default=lambda o: getattr(o, '__dict__', str(o))))"
    )
    printed = subprocess.run(
        [sys.executable, "-c", code], cwd=project, capture_output=True, text=True, check=True
    ).stdout
    return dict(yaml.safe_load(printed))


@cache
def manifest_of(project: Path) -> dict[str, Any]:
    """The manifest `make deploy-firebase` writes, for REGION and a nam5 database."""
    printed = subprocess.run(
        [sys.executable, "-m", "tools.deploy", "manifest", f"--project={PROJECT}",
         f"--region={REGION}", f"--firestore-location={LOCATION}",
         f"--bucket-location={BUCKET_LOCATION}"],
        cwd=project, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return dict(yaml.safe_load(printed))


@cache
def secret_versions(project: Path) -> str:
    """SECRET_VERSIONS pinning every secret main.py's functions declare to version 3, so that
    `make -n deploy-gcloud` needs no Secret Manager to print its plan."""
    code = (
        "from tools.deploy.gcloud import secret_names\n"
        "from tools.deploy.manifest import sdk_manifest\n"
        "print(*secret_names(sdk_manifest()))"
    )
    printed = subprocess.run(
        [sys.executable, "-c", code], cwd=project, capture_output=True, text=True, check=True
    ).stdout
    return "SECRET_VERSIONS=" + " ".join(f"{s}=3" for s in printed.split())


SUBSTITUTED = f"projects/{PROJECT}/subscriptions/read-when-it-runs"
"""What `make_commands` puts where a command reads an argument from gcloud when it runs."""


def make_commands(project: Path, target: str, *extra: str) -> list[list[str]]:
    """The gcloud commands `make -n TARGET` would run in `project`, as argument lists."""
    done = subprocess.run(
        ["make", "-n", target, *MAKE_VARS, secret_versions(project), *extra],
        cwd=project, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "error" not in done.stderr, done.stderr
    commands = []
    for line in done.stdout.replace("\\\n", " ").splitlines():
        for part in line.replace("||", ";").split(";"):
            if "gcloud" not in part:
                continue  # e.g. the install recipe, printed when a stamp is out of date
            words = [w for w in shlex.split(part) if not w.startswith((">", "2>"))]
            for word in words:  # a gcloud read whose answer is an argument: its own command
                if word.startswith("$(gcloud ") and word.endswith(")"):
                    commands.append(shlex.split(word[2:-1]))
            words = [SUBSTITUTED if w.startswith("$(gcloud ") else w for w in words]
            if "gcloud" in words:
                commands.append(words[words.index("gcloud") :])
    return commands


@cache
def function_deploys(project: Path) -> dict[str, list[str]]:
    """Function name -> its `gcloud functions deploy` command, from `make -n deploy-gcloud`."""
    return {
        cmd[3]: cmd
        for cmd in make_commands(project, "deploy-gcloud")
        if cmd[1:3] == ["functions", "deploy"]
    }


def is_http(endpoint: dict[str, Any]) -> bool:
    """An HTTP, callable or task-queue function (no event trigger, no platform retry)."""
    return endpoint.get("eventTrigger") is None


def trigger_of(endpoint: dict[str, Any]) -> tuple[str, str]:
    """(event type, document pattern or topic) of an event endpoint; ("http", kind) else."""
    if is_http(endpoint):
        kinds = sorted(k for k, v in endpoint.items() if k.endswith("Trigger") and v is not None)
        return "http", kinds[0]
    trigger = endpoint["eventTrigger"]
    filters = {**trigger.get("eventFilters", {}), **(trigger.get("eventFilterPathPatterns") or {})}
    if "bucket" in filters:  # the declared bucket is a deploy-time parameter, empty by default
        bucket = filters["bucket"]
        return trigger["eventType"], bucket if isinstance(
            bucket, str
        ) and "{" not in bucket else BUCKET
    if "alerttype" in filters:
        return trigger["eventType"], filters["alerttype"]
    return trigger["eventType"], filters.get("document") or filters["topic"].rsplit("/", 1)[-1]


def check_manifest(project: Path) -> None:
    """Every function main.py exports is in the manifest with its trigger, retry on, REGION,
    the database's location on Firestore triggers, its declared timeout and the runtime account."""
    declared = declared_functions(project)
    endpoints = manifest_of(project)["endpoints"]
    assert set(endpoints) == set(declared)
    for name, endpoint in endpoints.items():
        assert endpoint["entryPoint"] == name
        assert trigger_of(endpoint) == trigger_of(declared[name]), name
        if not is_http(endpoint):
            assert endpoint["eventTrigger"]["retry"] is True, name
        assert endpoint["region"] == [REGION], name
        assert isinstance(declared[name]["timeoutSeconds"], int), f"{name} declares no timeout"
        assert endpoint["timeoutSeconds"] == declared[name]["timeoutSeconds"], name
        assert (
            endpoint["serviceAccountEmail"] == f"exactly-once-fn@{PROJECT}.iam.gserviceaccount.com"
        )
        if trigger_of(endpoint)[0].startswith(FIRESTORE_PREFIX):
            assert endpoint["eventTrigger"]["region"] == LOCATION, name
        if trigger_of(endpoint)[0] == STORAGE_FINALIZED:
            assert endpoint["eventTrigger"]["region"] == BUCKET_LOCATION.lower(), name
        if trigger_of(endpoint)[0] == ALERT_PUBLISHED:
            assert endpoint["eventTrigger"]["region"] == "global", name


def check_gcloud(project: Path) -> None:
    """`make deploy-gcloud` deploys every function main.py exports, each in REGION with its
    trigger, --retry, its timeout and the same runtime shape as the firebase manifest."""
    declared = declared_functions(project)
    manifest = manifest_of(project)["endpoints"]
    deploys = function_deploys(project)
    assert set(deploys) == set(declared)
    for name, cmd in deploys.items():
        endpoint = manifest[name]
        runtime = f"--runtime=python3{sys.version_info.minor}"  # the venv's (tools.runtime)
        assert {"--gen2", runtime, f"--region={REGION}"} <= set(cmd), name
        assert f"--entry-point={name}" in cmd
        assert f"--timeout={declared[name]['timeoutSeconds']}s" in cmd
        assert f"--memory={endpoint['availableMemoryMb']}Mi" in cmd
        for key, flag in SHAPE_FLAGS:
            assert f"{flag}={endpoint[key]}" in cmd, (name, flag)
        account = f"exactly-once-fn@{PROJECT}.iam.gserviceaccount.com"
        assert f"--service-account={account}" in cmd
        event_type, where = trigger_of(declared[name])
        if event_type == "http":
            assert "--trigger-http" in cmd, name
            assert "--retry" not in cmd, name
            continue
        assert {"--retry", f"--trigger-service-account={account}"} <= set(cmd), name
        if event_type == PUBSUB_PUBLISHED:
            assert f"--trigger-topic={where}" in cmd
        elif event_type == STORAGE_FINALIZED:
            assert f"--trigger-bucket={where}" in cmd, name
        elif event_type == ALERT_PUBLISHED:
            assert f"--trigger-event-filters=type={event_type}" in cmd
            assert f"--trigger-event-filters=alerttype={where}" in cmd
            assert "--trigger-location=global" in cmd
        else:
            assert f"--trigger-event-filters=type={event_type}" in cmd
            assert f"--trigger-event-filters-path-pattern=document={where}" in cmd
            assert f"--trigger-location={LOCATION}" in cmd


def test_manifest_has_every_function_of_main_py_in_the_region_with_retries_on() -> None:
    """`firebase deploy` gets exactly main.py's functions, in REGION, retries on, timeouts set."""
    check_manifest(ROOT)


def test_gcloud_deploys_every_function_of_main_py_like_firebase() -> None:
    """`make deploy-gcloud` is generated from the same manifest: same functions, same shape."""
    check_gcloud(ROOT)


WELCOME_MAIL = '''"""A throwaway lease-mode function, added the way the README says."""

from firebase_functions import firestore_fn

from dedup import Delivery, trigger_once
from functions.boundary import validated


@validated
@firestore_fn.on_document_created(document="users/{uid}")
@trigger_once("send_welcome_mail")
def send_welcome_mail(
    event: firestore_fn.Event[firestore_fn.DocumentSnapshot | None], delivery: Delivery
) -> None:
    """Pretend to mail the new user."""
'''


def test_a_function_added_to_main_py_is_deployed_by_both_paths(project_copy: Path) -> None:
    """A function exported from main.py and nothing else reaches the manifest and the gcloud
    commands with its trigger, retry, region and timeout; the deploy checks still hold."""
    add_function(project_copy, "welcome_mail", WELCOME_MAIL, "send_welcome_mail")
    assert "send_welcome_mail" in declared_functions(project_copy)
    endpoint = manifest_of(project_copy)["endpoints"]["send_welcome_mail"]
    assert trigger_of(endpoint) == (FIRESTORE_PREFIX + "created", "users/{uid}")
    assert endpoint["eventTrigger"]["retry"] is True
    assert endpoint["region"] == [REGION]
    assert endpoint["timeoutSeconds"] == 50
    cmd = function_deploys(project_copy)["send_welcome_mail"]
    assert {"--retry", f"--region={REGION}", "--timeout=50s", f"--trigger-location={LOCATION}",
            f"--trigger-event-filters=type={FIRESTORE_PREFIX}created",
            "--trigger-event-filters-path-pattern=document=users/{uid}"} <= set(cmd)  # fmt: skip
    check_manifest(project_copy)
    check_gcloud(project_copy)


def run_reads(planned: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the commands with which a plan reads its deploy-time values (every line before its
    first gcloud command), in turn as make runs them, stopping at the first that fails."""
    lines = planned.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("gcloud "))
    reads = lines[:first]
    assert all(" -m tools.deploy read " in line for line in reads), reads
    return subprocess.run(
        ["bash", "-c", "set -e\n" + "\n".join(reads)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def expanded(command: str, cwd: Path) -> list[str]:
    """The arguments the shell gives a planned gcloud `command` when it runs (after the reads)."""
    assert command.startswith("gcloud "), command
    printed = subprocess.run(
        ["bash", "-c", "printf '%s\\0' " + command.removeprefix("gcloud ")],
        cwd=cwd, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return ["gcloud", *printed.split("\0")[:-1]]


def test_without_a_database_location_the_deploy_refuses_and_says_how(
    project_copy: Path, tmp_path: Path
) -> None:
    """With no FIRESTORE_LOCATION and a database gcloud cannot read, nothing is deployed and the
    message names FIRESTORE_LOCATION: the firebase manifest is refused, and the gcloud plan,
    which reads the location only when it runs, stops at that read, before any deploy."""
    env = {**os.environ, "CLOUDSDK_CONFIG": str(tmp_path), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "tools.deploy", "manifest", *WHERE],
        cwd=project_copy, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stdout == ""
    refusals = [done.stderr]
    planned = subprocess.run(
        [sys.executable, "-m", "tools.deploy", "plan", "deploy-gcloud", *WHERE],
        cwd=project_copy, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "--trigger-location=$(cat " in planned
    done = run_reads(planned, project_copy, env)
    assert done.returncode == 2
    refusals.append(done.stderr)
    for stderr in refusals:
        assert "error: could not read the location of Firestore database (default)" in stderr
        assert "FIRESTORE_LOCATION=" in stderr
    assert not list(project_copy.glob(".cache/deploy/*/at-deploy/firestore-location-*"))


@pytest.mark.parametrize(
    ("env_line", "expected"),
    [
        ("DEDUP_LEASE_SECONDS=59", "Set DEDUP_LEASE_SECONDS to at least 60"),
        ("DEDUP_RPC_TIMEOUT_SECONDS=20", "Set DEDUP_LEASE_SECONDS to at least 70"),
        ("DEDUP_RETENTON_DAYS=30", "did you mean DEDUP_RETENTION_DAYS?"),
    ],
)
def test_a_lease_below_the_timeout_or_a_misspelled_setting_stops_the_deploy(
    project_copy: Path, env_line: str, expected: str
) -> None:
    """Both paths refuse, before anything is deployed, settings the functions would refuse."""
    (project_copy / f".env.{PROJECT}").write_text(env_line + "\n")
    for command in (["manifest", "functions.yaml"], ["plan", "deploy-gcloud"]):
        done = subprocess.run(
            [sys.executable, "-m", "tools.deploy", *command, *WHERE, "--firestore-location=nam5",
             "--bucket-location=EU"],
            cwd=project_copy, capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 2, command
        assert expected in done.stderr, (command, done.stderr)
        assert done.stdout == ""
    assert not (project_copy / "functions.yaml").exists()


def test_make_deploy_gcloud_stops_when_the_plan_is_refused(project_copy: Path) -> None:
    """A refused plan fails `make deploy-gcloud` before any gcloud command runs."""
    (project_copy / f".env.{PROJECT}").write_text("DEDUP_LEASE_SECONDS=59\n")
    done = subprocess.run(
        ["make", "deploy-gcloud", *MAKE_VARS, "-o", "topics", "-o", "queues"],
        cwd=project_copy, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode != 0
    assert "Set DEDUP_LEASE_SECONDS to at least 60" in done.stderr
    assert "gcloud functions deploy" not in done.stdout


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_an_interrupted_firebase_deploy_leaves_no_functions_yaml(
    project_copy: Path, sig: str
) -> None:
    """The manifest exists only while `firebase deploy` runs; an interrupted deploy removes it."""
    started = project_copy / "firebase-started"
    fake = project_copy / "fake-firebase.sh"
    fake.write_text(f"#!/bin/sh\ntouch {started}\nexec sleep 60\n")
    fake.chmod(0o755)
    make = subprocess.Popen(
        ["make", "deploy-firebase", *MAKE_VARS, "-o", "install", "-o", "topics",
         f"EMULATORS={fake}"],
        cwd=project_copy, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        for _ in range(600):
            if started.exists() or make.poll() is not None:
                break
            subprocess.run(["sleep", "0.1"], check=True)
        assert started.exists(), make.communicate()[0]
        manifest = project_copy / "functions.yaml"
        assert manifest.read_text().startswith("# Generated by tools/deploy.py")
        os.killpg(make.pid, getattr(__import__("signal"), sig))
        make.wait(timeout=60)
        for _ in range(100):  # make may exit a moment before its recipe's shell runs the trap
            if not manifest.exists():
                break
            subprocess.run(["sleep", "0.1"], check=True)
        assert not manifest.exists()
    finally:
        if make.poll() is None:
            os.killpg(make.pid, 9)


GCLOUD_ANSWERS: dict[tuple[str, ...], subprocess.CompletedProcess[str]] = {}
"""gcloud's answer to each command line run so far this session, with no credentials and the
same env files: a command that several targets plan (or one target twice) is parsed once, as
the same words give the same answer."""


@needs_gcloud
# deploy-run's 69 commands each start gcloud (about a second of CPU apiece): the suite's 300 s
# ran out on a loaded machine (two cores, load 15), the commands still running.
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "target",
    ["deploy-gcloud", "deploy-run", "bootstrap", "ttl", "topics", "queues", "deploy-firebase"],
)
def test_gcloud_accepts_every_argument(target: str, tmp_path: Path) -> None:
    """Each command fails only for want of credentials, never for an argument gcloud refuses."""
    for tool in ("tools.deploy", "tools.deploy_run"):  # the env files gcloud reads as it parses
        subprocess.run(
            [sys.executable, "-m", tool, "env-files", *WHERE],
            cwd=ROOT, check=True, capture_output=True,
        )  # fmt: skip
    env = {**os.environ, "CLOUDSDK_CONFIG": str(tmp_path), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"}
    commands = [tuple(cmd) for cmd in make_commands(ROOT, target)]
    assert commands, f"make -n {target} printed no gcloud command"
    new = [cmd for cmd in dict.fromkeys(commands) if cmd not in GCLOUD_ANSWERS]
    with ThreadPoolExecutor(4) as pool:
        results = pool.map(
            lambda cmd: subprocess.run(
                cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
            ),
            new,
        )
        GCLOUD_ANSWERS.update(zip(new, results, strict=True))
    for cmd in commands:
        result = GCLOUD_ANSWERS[cmd]
        assert result.returncode != 0, cmd
        assert "active account" in result.stderr, (cmd, result.stderr[-600:])
        assert "unrecognized arguments" not in result.stderr, cmd


QUEUE_SETTINGS = {
    ("retryConfig", "maxAttempts"): "--max-attempts={}",
    ("retryConfig", "maxRetrySeconds"): "--max-retry-duration={}s",
    ("retryConfig", "minBackoffSeconds"): "--min-backoff={}s",
    ("retryConfig", "maxBackoffSeconds"): "--max-backoff={}s",
    ("retryConfig", "maxDoublings"): "--max-doublings={}",
    ("rateLimits", "maxConcurrentDispatches"): "--max-concurrent-dispatches={}",
    ("rateLimits", "maxDispatchesPerSecond"): "--max-dispatches-per-second={}",
}
"""Cloud Tasks' queue settings as firebase-tools reads them from the manifest, and gcloud's flag."""


def check_queues(project: Path) -> None:
    """`make queues` creates, or updates when it exists, one queue per task-queue function of
    main.py, named after it and in REGION, with exactly the settings its decorator declares
    (a setting left out is left out of both commands)."""
    manifest = manifest_of(project)["endpoints"]
    queues = {
        name: e["taskQueueTrigger"] for name, e in manifest.items() if "taskQueueTrigger" in e
    }
    assert queues, "main.py declares no task-queue function"
    commands = make_commands(project, "queues")
    for verb in ("create", "update", "describe"):
        found = {cmd[4]: cmd for cmd in commands if cmd[1:4] == ["tasks", "queues", verb]}
        assert set(found) == set(queues), verb
        for name, trigger in queues.items():
            assert f"--location={REGION}" in found[name], (verb, name)
            if verb == "describe":
                continue
            declared = {
                flag.format(trigger[group][key])
                for (group, key), flag in QUEUE_SETTINGS.items()
                if (trigger.get(group) or {}).get(key) is not None
            }
            assert declared, name
            settings = {w for w in found[name] if w.split("=")[0] in
                        {f.split("=")[0] for f in QUEUE_SETTINGS.values()}}  # fmt: skip
            assert settings == declared, (verb, name)


def test_each_task_queue_gets_the_retry_and_rates_its_decorator_declares() -> None:
    """main.py's task-queue functions: their queues are created or updated as declared."""
    check_queues(ROOT)


SEND_INVOICE = '''"""A throwaway task-queue function whose queue sets only a concurrency limit."""

from firebase_functions import options, tasks_fn

from dedup import Delivery
from dedup.tasks import task_once


@tasks_fn.on_task_dispatched(rate_limits=options.RateLimits(max_concurrent_dispatches=10))
@task_once("send_invoice")
def {name}(request: tasks_fn.CallableRequest, delivery: Delivery) -> None:
    """Pretend to send the invoice."""
'''


def test_a_task_function_with_only_a_concurrency_limit_is_planned_as_declared(
    project_copy: Path,
) -> None:
    """RateLimits(max_concurrent_dispatches=10) alone, as docs/tasks.md shows it: the queue
    gets that setting, and no dispatch rate is invented."""
    add_function(project_copy, "send_invoice", SEND_INVOICE.format(name="sendInvoice"),
                 "sendInvoice")  # fmt: skip
    trigger = manifest_of(project_copy)["endpoints"]["sendInvoice"]["taskQueueTrigger"]
    assert trigger["rateLimits"] == {"maxConcurrentDispatches": 10}
    check_queues(project_copy)
    check_manifest(project_copy)
    check_gcloud(project_copy)


def test_a_task_function_name_cloud_tasks_would_refuse_is_refused_by_every_plan(
    project_copy: Path,
) -> None:
    """`send_invoice` cannot be a queue id (no `_`): both paths refuse it, naming it."""
    add_function(project_copy, "send_invoice", SEND_INVOICE.format(name="send_invoice"),
                 "send_invoice")  # fmt: skip
    for command in (["manifest"], ["plan", "deploy-gcloud"], ["plan", "queues"]):
        done = subprocess.run(
            [sys.executable, "-m", "tools.deploy", *command, *WHERE, "--firestore-location=nam5",
             "--bucket-location=EU"],
            cwd=project_copy, capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 2, command
        assert done.stdout == ""
        assert done.stderr.startswith("error: send_invoice is a task-queue function"), command
        assert "e.g. sendInvoice" in done.stderr


def test_bootstrap_grants_exactly_what_the_functions_use() -> None:
    """The runtime account gets Firestore, Pub/Sub publish, the trigger roles, secret access
    for the functions that declare secrets, and FCM only while NOTIFY_URL is unset; the
    Pub/Sub agent gets the token creator role firebase grants; the account Cloud Build says it
    builds as (read when the plan runs) gets what `gcloud run deploy --source` builds with (the
    Cloud Run functions path)."""
    commands = make_commands(ROOT, "bootstrap")
    account = f"serviceAccount:exactly-once-fn@{PROJECT}.iam.gserviceaccount.com"
    grants = {
        (next(w for w in c if w.startswith("--member=")).removeprefix("--member="),
         next(w for w in c if w.startswith("--role=")).removeprefix("--role="))
        for c in commands if "add-iam-policy-binding" in c
    }  # fmt: skip
    act_as = [
        c
        for c in commands
        if c[:4] == ["gcloud", "iam", "service-accounts", "add-iam-policy-binding"]
    ]
    assert [(c[4], next(w for w in c if w.startswith("--role="))) for c in act_as] == [
        (account.removeprefix("serviceAccount:"), "--role=roles/iam.serviceAccountUser")
    ]  # indexPost's tasks carry an OIDC token for the runtime account: it acts as itself
    assert grants == {
        (account, "roles/datastore.user"),
        (account, "roles/pubsub.publisher"),
        (account, "roles/eventarc.eventReceiver"),
        (account, "roles/run.invoker"),
        (account, "roles/cloudtasks.enqueuer"),  # indexPost: relay_outbox creates its tasks
        (account, "roles/iam.serviceAccountUser"),  # on itself (checked above), for indexPost
        (account, "roles/firebasecloudmessaging.admin"),  # no .env.demo-parse-only: FCM
        (account, "roles/secretmanager.secretAccessor"),  # receive_line_webhook's LINE secret
        ("serviceAccount:service-123456789012@gcp-sa-pubsub.iam.gserviceaccount.com",
         "roles/iam.serviceAccountTokenCreator"),
        ("serviceAccount:service-123456789012@gs-project-accounts.iam.gserviceaccount.com",
         "roles/pubsub.publisher"),  # register_upload: the Storage agent publishes its events
        (f"serviceAccount:$(cat .cache/deploy/{PROJECT}/at-deploy/build-account-{PROJECT})",
         "roles/run.builder"),  # the Cloud Run path: the account Cloud Build says it builds as
    }  # fmt: skip
    enable = next(c for c in commands if c[1:3] == ["services", "enable"])
    for api in ("cloudfunctions", "run", "cloudbuild", "artifactregistry", "eventarc", "pubsub",
                "firestore", "secretmanager", "cloudtasks", "fcm"):  # fmt: skip
        assert f"{api}.googleapis.com" in enable
    create = [c for c in commands if c[1:4] == ["iam", "service-accounts", "create"]]
    assert create
    assert create[0][4] == "exactly-once-fn"
