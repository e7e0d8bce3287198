"""Both deploy paths, run as the README types them, against a local fake of Google's APIs.

`make deploy-gcloud PROJECT=p REGION=europe-west1` and `make deploy-firebase PROJECT=p
REGION=europe-west1` run in a copy of the project, non-interactive (`CI=true`, stdin closed,
no TTY), with the real gcloud (a throwaway CLOUDSDK_CONFIG, `api_endpoint_overrides` pointing
at the fake through gcloud's property variables, a fake access token) and the pinned
firebase-tools (its API origins from the environment variables of firebase-tools'
`lib/api.js`, a fake refresh token through FIREBASE_TOKEN, exchanged at the fake). The fake
(`fake_google.py`) records every request and
every uploaded archive; the tests then check, per function and per path, what the platform was
told, against the manifest firebase-functions builds from main.py (the functions' one
declaration), and that the uploaded archive really serves every function.

Marked `deploy_harness`: `make test` runs it (a few minutes), `make unit` does not.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from demo.serve import free_port
from tests.deploy.conftest import ROOT, copy_project
from tests.deploy.fake_google import (
    BUCKET_LOCATION,
    FIRESTORE_LOCATION,
    PROJECT_NUMBER,
    FakeGoogle,
    RunningFake,
)
from tests.deploy.test_upload import check_only_code
from tools.deploy.manifest import sdk_manifest

pytestmark = [
    pytest.mark.deploy_harness,
    pytest.mark.skipif(shutil.which("gcloud") is None, reason="the Google Cloud CLI is missing"),
    pytest.mark.timeout(1500),  # both deploys run in the first test's set-up (parallel)
]

PROJECT = "p"
REGION = "europe-west1"
ACCOUNT = f"exactly-once-fn@{PROJECT}.iam.gserviceaccount.com"
SECRET_VERSION = 3
REPOSITORY = f"projects/{PROJECT}/locations/{REGION}/repositories/gcf-artifacts"
ENV_FILE = {
    "WEBHOOK_ROUTES": '{"default": "https://example.com/webhooks/default"}',
    "NOTIFY_URL": "https://example.com/notify",
    "SEARCH_INDEX_URL": "https://example.com/search",
    "DIGEST_URL": "https://example.com/digest",
    "CHAT_WEBHOOK_URL": "https://example.com/chat",
    "PAYMENTS_URL": "https://example.com/payments",
    "RECEIPTS_URL": "https://example.com/receipts",
}
"""`.env.p` of the copy: the variables both paths must give every function."""
GCLOUD_APIS = (
    "cloudfunctions", "run", "eventarc", "pubsub", "cloudtasks", "iam", "secretmanager",
    "firestore", "cloudresourcemanager", "serviceusage", "artifactregistry", "cloudbilling",
    "storage", "cloudbuild", "logging", "monitoring", "cloudscheduler",
)  # fmt: skip
FIREBASE_ORIGINS = (
    "FIREBASE_CLOUDBILLING_URL", "FIREBASE_CLOUDLOGGING_URL", "CLOUD_MONITORING_URL",
    "ARTIFACT_REGISTRY_DOMAIN", "EVENTARC_URL", "FIREBASE_API_URL", "FIRESTORE_URL",
    "FIREBASE_FUNCTIONS_URL", "FIREBASE_FUNCTIONS_V2_URL", "CLOUD_RUN_URL",
    "FIREBASE_CLOUDBUILD_URL", "FIREBASE_CLOUDSCHEDULER_URL", "FIREBASE_CLOUD_TAKS_URL",
    "FIREBASE_PUBSUB_URL", "FIREBASE_TOKEN_URL", "FIREBASE_GOOGLE_URL", "FIREBASE_IAM_URL",
    "FIREBASE_RESOURCEMANAGER_URL", "FIREBASE_RULES_URL", "FIREBASE_RUNTIMECONFIG_URL",
    "FIREBASE_STORAGE_URL", "FIREBASE_FIREBASESTORAGE_URL", "CLOUD_RUN_API_URL",
    "FIREBASE_SERVICE_USAGE_URL", "CLOUD_SECRET_MANAGER_URL", "COMPUTE_URL", "FIREBASE_EXT_URL",
    "FIREBASE_HOSTING_API_URL", "FIREBASE_APPCHECK_URL", "FIREBASE_AUTH_URL",
    "FIREBASE_AUTHPROXY_URL", "CLOUD_TRACE_URL", "FIREBASE_AUTH_MANAGEMENT_URL",
    "FIREBASE_IDENTITY_URL",
)  # fmt: skip
"""firebase-tools' API origins (`lib/api.js`, `utils.envOverride`) the fake takes over."""
PATHS = ("gcloud", "firebase")
MANIFEST = sdk_manifest(ROOT)["endpoints"]
"""What main.py declares, as firebase-functions reads it: the expectation on both paths."""


def gcloud_variable(prop: str) -> str:
    """The environment variable of gcloud property `section/name`."""
    return "CLOUDSDK_" + prop.replace("/", "_").upper()


def tool_env(fake: FakeGoogle, home: Path) -> dict[str, str]:
    """The deploy's environment: the caller's, less every Google, Firebase and emulator
    setting, plus a throwaway gcloud config and firebase-tools pointed at the fake."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CLOUDSDK", "GOOGLE", "FIREBASE", "GCLOUD", "K_", "FUNCTION"))
        and "EMULATOR" not in k
    }
    config = home / "gcloud"
    config.mkdir(parents=True)
    (home / "token").write_text("fake-access-token")
    env.update(CLOUDSDK_CONFIG=str(config), HOME=str(home), CI="true", NO_PROXY="127.0.0.1")
    # Every gcloud property can be set as CLOUDSDK_<SECTION>_<NAME> (`gcloud topic
    # configurations`): the same settings as `gcloud config set`, without one gcloud start
    # (half a second) per setting.
    settings = {
        "core/project": PROJECT,
        "auth/access_token_file": str(home / "token"),
        "core/disable_usage_reporting": "true",
        "component_manager/disable_update_check": "true",
        **{f"api_endpoint_overrides/{api}": f"{fake.url}/" for api in GCLOUD_APIS},
    }
    env.update({gcloud_variable(key): value for key, value in settings.items()})
    env.update({origin: fake.url for origin in FIREBASE_ORIGINS})
    env["FIREBASE_TOKEN"] = "fake-refresh-token"
    return env


class Deployed:
    """One deploy path's run: the make result and what the fake recorded."""

    def __init__(self, path: str, fake: FakeGoogle, done: subprocess.CompletedProcess[str]):
        self.path, self.fake, self.done = path, fake, done

    def function(self, name: str) -> dict[str, Any]:
        """The Cloud Functions v2 resource the path created for `name` in REGION."""
        full = f"projects/{PROJECT}/locations/{REGION}/functions/{name}"
        assert full in self.fake.resources, f"{self.path}: {name} not deployed in {REGION}"
        return self.fake.resources[full]

    def policy(self, function: dict[str, Any]) -> dict[str, Any]:
        """The IAM policy set on the function's Cloud Run service (or on the function)."""
        for name in (function["serviceConfig"].get("service", ""), function["name"]):
            if name + ":iam" in self.fake.resources:
                return self.fake.resources[name + ":iam"]
        return {"bindings": []}


def deploy(path: str, work: Path) -> Deployed:
    """`make deploy-<path> PROJECT=p REGION=europe-west1` against a fresh fake."""
    project = copy_project(work / "project")
    (project / f".env.{PROJECT}").write_text("".join(f"{k}={v}\n" for k, v in ENV_FILE.items()))
    with RunningFake() as fake:
        fake.add_secret(PROJECT, "LINE_CHANNEL_SECRET", SECRET_VERSION)
        fake.resources[REPOSITORY] = {"name": REPOSITORY, "format": "DOCKER"}  # builds make it
        env = tool_env(fake, work / "home")
        done = subprocess.run(
            ["make", f"deploy-{path}", f"PROJECT={PROJECT}", f"REGION={REGION}"],
            cwd=project, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=900, start_new_session=True,  # no controlling terminal
        )  # fmt: skip
    return Deployed(path, fake, done)


@pytest.fixture(scope="module")
def deploys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Deployed]:
    """Both paths' runs, once for the module, side by side (each against its own fake)."""
    with ThreadPoolExecutor(len(PATHS)) as pool:
        runs = {p: pool.submit(deploy, p, tmp_path_factory.mktemp(f"deploy-{p}")) for p in PATHS}
        return {path: run.result() for path, run in runs.items()}


@pytest.fixture(params=PATHS)
def deployed(request: pytest.FixtureRequest, deploys: dict[str, Deployed]) -> Deployed:
    """One path's run."""
    return deploys[request.param]


def test_the_deploy_succeeds_without_a_person(deployed: Deployed) -> None:
    """The make target exits 0 with no TTY, and the tools called nothing the fake lacks."""
    out = deployed.done.stdout[-4000:] + deployed.done.stderr[-4000:]
    assert deployed.done.returncode == 0, out
    assert deployed.fake.unknown == [], deployed.fake.unknown


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_runtime_shape(deployed: Deployed, name: str) -> None:
    """Region, entry point, runtime, memory, CPU, concurrency, instances, timeout, account."""
    endpoint = MANIFEST[name]
    function = deployed.function(name)
    build, service = function["buildConfig"], function["serviceConfig"]
    assert build["runtime"] == f"python3{sys.version_info.minor}"  # the venv's (tools.runtime)
    assert build["entryPoint"] == endpoint["entryPoint"]
    assert service["availableMemory"] in (f"{endpoint['availableMemoryMb']}Mi",
                                          f"{endpoint['availableMemoryMb']}M")  # fmt: skip
    assert float(service["availableCpu"]) == endpoint["cpu"]
    assert service["maxInstanceRequestConcurrency"] == endpoint["concurrency"]
    assert service.get("minInstanceCount", 0) == endpoint["minInstances"]
    assert service["maxInstanceCount"] == endpoint["maxInstances"]
    assert service["timeoutSeconds"] == endpoint["timeoutSeconds"]
    assert service["serviceAccountEmail"] == ACCOUNT


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_variables(deployed: Deployed, name: str) -> None:
    """Every variable of `.env.p` reaches every function; no DEDUP_ leak from the shell."""
    variables = deployed.function(name)["serviceConfig"].get("environmentVariables", {})
    for key, value in ENV_FILE.items():
        assert variables.get(key) == value, (name, key)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_secrets(deployed: Deployed, name: str) -> None:
    """The declared secrets are mounted from Secret Manager under their names, nothing else."""
    declared = {s["key"]: s.get("secret") or s["key"] for s in
                MANIFEST[name].get("secretEnvironmentVariables") or []}  # fmt: skip
    mounted = deployed.function(name)["serviceConfig"].get("secretEnvironmentVariables") or []
    assert {m["key"]: m["secret"] for m in mounted} == declared
    for secret in mounted:
        assert secret.get("projectId") in (PROJECT, PROJECT_NUMBER, None, "")


def test_secret_versions_are_the_same_on_both_paths(deploys: dict[str, Deployed]) -> None:
    """A rotated secret behaves the same on both paths: both mount the same version."""
    for name in sorted(MANIFEST):
        versions = {
            path: {m["key"]: m.get("version") for m in
                   run.function(name)["serviceConfig"].get("secretEnvironmentVariables") or []}
            for path, run in deploys.items()
        }  # fmt: skip
        assert versions["gcloud"] == versions["firebase"], (name, versions)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_trigger(deployed: Deployed, name: str) -> None:
    """Trigger type, filters, database, document pattern, topic, region, retry, identity."""
    endpoint = MANIFEST[name]
    function = deployed.function(name)
    trigger = function.get("eventTrigger")
    declared = endpoint.get("eventTrigger")
    if declared is None:
        assert trigger is None, name
        return
    assert trigger is not None, name
    assert trigger["eventType"] == declared["eventType"]
    assert trigger["retryPolicy"] == "RETRY_POLICY_RETRY", name
    assert trigger["serviceAccountEmail"] == ACCOUNT
    filters = {f["attribute"]: f for f in trigger.get("eventFilters") or []}
    if declared["eventType"].startswith("google.cloud.pubsub"):
        topic = declared["eventFilters"]["topic"]
        assert trigger["pubsubTopic"] == f"projects/{PROJECT}/topics/{topic}"
        assert trigger.get("triggerRegion", REGION) == REGION
        return
    if declared["eventType"].startswith("google.cloud.storage"):
        assert filters["bucket"]["value"] == f"{PROJECT}.firebasestorage.app", name
        assert trigger["triggerRegion"] == BUCKET_LOCATION.lower(), name
        return
    if declared["eventType"].startswith("google.firebase.firebasealerts"):
        assert filters["alerttype"]["value"] == "crashlytics.newFatalIssue", name
        assert trigger["triggerRegion"] == "global", name
        return
    assert trigger["triggerRegion"] == FIRESTORE_LOCATION
    for key, value in declared.get("eventFilters", {}).items():
        assert filters[key]["value"] == value, (name, key)
        assert filters[key].get("operator") in (None, "")
    for key, value in (declared.get("eventFilterPathPatterns") or {}).items():
        assert filters[key]["value"] == value, (name, key)
        assert filters[key]["operator"] == "match-path-pattern"


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_invoker(deployed: Deployed, name: str) -> None:
    """HTTP and callable functions are public; task-queue and event functions are not."""
    endpoint = MANIFEST[name]
    function = deployed.function(name)
    members = {
        member
        for binding in deployed.policy(function).get("bindings", [])
        if binding["role"] in ("roles/run.invoker", "roles/cloudfunctions.invoker")
        for member in binding.get("members", [])
    }
    public = "httpsTrigger" in endpoint or "callableTrigger" in endpoint
    assert ("allUsers" in members) == public, (name, members)


@pytest.mark.parametrize("name", sorted(n for n, e in MANIFEST.items() if "taskQueueTrigger" in e))
def test_task_queue(deployed: Deployed, name: str) -> None:
    """The queue is named after the function, in REGION, with the declared retry and rates."""
    queue = deployed.fake.resources.get(f"projects/{PROJECT}/locations/{REGION}/queues/{name}")
    assert queue is not None, f"{deployed.path}: no queue {name} in {REGION}"
    declared = MANIFEST[name]["taskQueueTrigger"]
    for group in ("retryConfig", "rateLimits"):
        for key, value in (declared.get(group) or {}).items():
            got = (queue.get(group) or {}).get(key.replace("Seconds", ""))
            got = got if got is not None else (queue.get(group) or {}).get(key)
            assert float(str(got).rstrip("s")) == float(value), (group, key, got)


def test_firebase_sets_the_image_cleanup_policy(deploys: dict[str, Deployed]) -> None:
    """The Artifact Registry cleanup prompt is answered by --force: a policy is set."""
    repository = deploys["firebase"].fake.resources[REPOSITORY]
    assert repository.get("cleanupPolicies"), repository


def uploaded(deployed: Deployed) -> list[bytes]:
    """The archives the path uploaded."""
    assert deployed.fake.uploads, f"{deployed.path} uploaded nothing"
    return deployed.fake.uploads


def test_upload_is_the_code_only(deployed: Deployed) -> None:
    """Every uploaded archive holds main.py, requirements.txt, dedup/ and functions/, and no
    .env*, .secret.local, cache, venv, tests or docs."""
    for archive in uploaded(deployed):
        with zipfile.ZipFile(io.BytesIO(archive)) as opened:
            names = opened.namelist()
        check_only_code([n for n in names if not n.endswith("/")])
        assert all("__pycache__" not in n and "venv" not in n.split("/") for n in names)


@pytest.fixture(scope="module")
def runtime_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One venv for the module, built from the project's requirements.txt only (the test of
    each archive installs its own requirements.txt into it, a no-op when they match)."""
    venv = tmp_path_factory.mktemp("runtime") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "--quiet", "--disable-pip-version-check", "-r", str(ROOT / "requirements.txt")],
        check=True, timeout=900,
    )  # fmt: skip
    return venv


def serve_once(venv: Path, source: Path, target: str, env: dict[str, str]) -> int:
    """Start `functions-framework --target=TARGET` in SOURCE and make one request; its status."""
    port = free_port()
    server = subprocess.Popen(
        [str(venv / "bin" / "functions-framework"), f"--target={target}", f"--port={port}",
         "--host=127.0.0.1"],
        cwd=source, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise AssertionError(f"{target} did not start:\n{server.stdout.read()[-3000:]}")  # type: ignore[union-attr]
            try:
                return requests.get(f"http://127.0.0.1:{port}/", timeout=10).status_code
            except requests.ConnectionError:
                time.sleep(0.2)
        raise AssertionError(f"{target} did not listen within 60 s")
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_uploaded_archive_serves_every_function(
    deployed: Deployed, runtime_venv: Path, tmp_path: Path
) -> None:
    """The archive, unzipped into a fresh folder with a venv from its own requirements.txt,
    imports main.py and serves every function it was deployed for (one request each)."""
    archives = set(uploaded(deployed))
    for number, archive in enumerate(sorted(archives)):
        source = tmp_path / f"archive-{number}"
        with zipfile.ZipFile(io.BytesIO(archive)) as opened:
            opened.extractall(source)
        subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(runtime_venv / "bin" / "python"),
             "install", "--quiet", "--disable-pip-version-check", "-r",
             str(source / "requirements.txt")],
            check=True, timeout=900,
        )  # fmt: skip
        for name in sorted(MANIFEST):
            service = deployed.function(name)["serviceConfig"]
            env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path),
                   **service.get("environmentVariables", {}),
                   "K_SERVICE": name, "FUNCTION_TARGET": MANIFEST[name]["entryPoint"],
                   "GOOGLE_CLOUD_PROJECT": PROJECT, "GCLOUD_PROJECT": PROJECT,
                   **{s["key"]: "fake-secret" for s in
                      service.get("secretEnvironmentVariables") or []}}  # fmt: skip
            status = serve_once(runtime_venv, source, MANIFEST[name]["entryPoint"], env)
            assert status < 500, (deployed.path, name, status)


ENQUEUE = """
from functions.outbox_tasks import create_task
create_task("indexPost", {"postId": "p1"}, "harness-task-1")
"""
"""What `relay_outbox` does for a task outbox document (functions.outbox_tasks), by bare name."""


def test_relay_enqueues_in_the_functions_region(
    deployed: Deployed, runtime_venv: Path, tmp_path: Path
) -> None:
    """A task the relay creates, from the uploaded archive under the variables relay_outbox was
    deployed with, goes to REGION's queue and targets REGION's function (firebase-admin's
    CLOUD_TASKS_EMULATOR_HOST points it at the fake's Cloud Tasks API)."""
    source = tmp_path / "archive"
    with zipfile.ZipFile(io.BytesIO(uploaded(deployed)[0])) as opened:
        opened.extractall(source)
    service = deployed.function("relay_outbox")["serviceConfig"]
    with RunningFake() as fake:
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path),
               **service.get("environmentVariables", {}), "K_SERVICE": "relay-outbox",
               "FUNCTION_TARGET": "relay_outbox",
               "CLOUD_TASKS_EMULATOR_HOST": f"127.0.0.1:{fake.port}"}  # fmt: skip
        done = subprocess.run(
            [str(runtime_venv / "bin" / "python"), "-c", ENQUEUE],
            cwd=source, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    created = fake.calls("POST", "/tasks")
    if not created:  # the harness is broken, or the code refused to enqueue: say which
        raise RuntimeError(f"no task reached the fake: {done.stderr[-3000:]}")
    request = created[0]
    assert f"/projects/{PROJECT}/locations/{REGION}/queues/indexPost/tasks" in request.path
    # With CLOUD_TASKS_EMULATOR_HOST, firebase-admin leaves the target URL empty unless the
    # caller sets it (the emulator routes by queue); a URL that is set must be REGION's.
    url = request.body["task"]["httpRequest"]["url"]
    assert url in ("", f"https://{REGION}-{PROJECT}.cloudfunctions.net/indexPost")


@pytest.mark.parametrize("name", sorted(n for n, e in MANIFEST.items() if "scheduleTrigger" in e))
def test_schedule_job(deployed: Deployed, name: str) -> None:
    """Each path creates the scheduled function's job, the one firebase-tools names, with the
    cron, time zone, retries, an attempt deadline no shorter than the timeout, and a POST with
    an OIDC token for the runtime account."""
    declared = MANIFEST[name]["scheduleTrigger"]
    job = f"projects/{PROJECT}/locations/{REGION}/jobs/firebase-schedule-{name}-{REGION}"
    created = deployed.fake.resources.get(job)
    assert created is not None, sorted(k for k in deployed.fake.resources if "/jobs/" in k)
    assert created["schedule"] == declared["schedule"] == "0 8 * * *"
    assert created.get("timeZone") == "UTC"
    assert created["retryConfig"]["retryCount"] == declared["retryConfig"]["retryCount"] >= 1
    deadline = int(str(created["attemptDeadline"]).rstrip("s"))
    assert deadline >= MANIFEST[name]["timeoutSeconds"]
    target = created["httpTarget"]
    assert target.get("httpMethod", "POST") == "POST"
    assert target["oidcToken"]["serviceAccountEmail"] == ACCOUNT
