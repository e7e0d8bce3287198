"""`make deploy-run PROJECT=p REGION=europe-west1` for real, against the fake of Google's APIs.

The real gcloud runs every command of the plan (a throwaway CLOUDSDK_CONFIG, its
`api_endpoint_overrides` pointing at the fake, as `test_real_deploy.py` sets it up). `gcloud run`
puts the region in front of its API's host (`europe-west1-HOST`), which no resolver knows, so
its override names a host only the fake's proxy answers (`HTTP_PROXY` is the fake itself, which
reads the absolute URL of a proxied request as any other). The fake records the Cloud Run
services, the source build, the uploaded archive, the Eventarc triggers with the subscription
Eventarc gives each, the Pub/Sub topics, subscriptions and IAM policies, the scheduler job and
the queue; the tests check them against the manifest firebase-functions builds from main.py.

Marked `deploy_harness`: `make test` runs it, `make unit` does not.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from dedup.config import DedupConfig
from tests.deploy.conftest import copy_project
from tests.deploy.fake_google import (
    BUCKET_LOCATION,
    COMPUTE_BUILD_ACCOUNT,
    FIRESTORE_LOCATION,
    PROJECT_NUMBER,
    FakeGoogle,
    RunningFake,
)
from tests.deploy.test_real_deploy import (
    ENV_FILE,
    MANIFEST,
    PROJECT,
    SECRET_VERSION,
    gcloud_variable,
    tool_env,
)
from tests.deploy.test_upload import check_only_code
from tools.deploy.manifest import deploy_env, trigger_topic
from tools.deploy.target import Target
from tools.run_service import delivery_attempts

pytestmark = [
    pytest.mark.deploy_harness,
    pytest.mark.skipif(shutil.which("gcloud") is None, reason="the Google Cloud CLI is missing"),
    pytest.mark.timeout(1500),
]

REGION = "europe-west1"
BUILD_ACCOUNT = f"projects/-/serviceAccounts/{COMPUTE_BUILD_ACCOUNT}"
RUN_REPOSITORY = f"projects/{PROJECT}/locations/{REGION}/repositories/cloud-run-source-deploy"
EVENT_FUNCTIONS = sorted(n for n, e in MANIFEST.items() if e.get("eventTrigger") is not None)
RUN_ACCOUNT = f"exactly-once-fn@{PROJECT}.iam.gserviceaccount.com"
PUBSUB_AGENT = f"serviceAccount:service-{PROJECT_NUMBER}@gcp-sa-pubsub.iam.gserviceaccount.com"


def service_of(name: str) -> str:
    """The Cloud Run service of function `name` (docs/deploy.md: its entry point, lowercased,
    `_` -> `-`)."""
    return str(MANIFEST[name]["entryPoint"]).lower().replace("_", "-")


def run_url(name: str) -> str:
    """The service's deterministic run.app URL in this project and region."""
    return f"https://{service_of(name)}-{PROJECT_NUMBER}.{REGION}.run.app"


class RunDeploy:
    """The make run and what the fake recorded."""

    def __init__(
        self,
        fake: FakeGoogle,
        done: subprocess.CompletedProcess[str],
        project: Path,
        again: subprocess.CompletedProcess[str],
    ) -> None:
        self.fake, self.done, self.project, self.again = fake, done, project, again

    def service(self, name: str) -> dict:
        """The Knative service `gcloud run deploy` created for function `name`."""
        full = f"apis/serving.knative.dev/v1/namespaces/{PROJECT}/services/{service_of(name)}"
        assert full in self.fake.resources, f"{service_of(name)} not deployed"
        return self.fake.resources[full]

    def stored(self, name: str) -> dict[str, Any]:
        """A resource the fake stores, by its full name."""
        assert name in self.fake.resources, f"{name} was not created"
        return self.fake.resources[name]

    def trigger(self, name: str) -> tuple[str, dict[str, Any]]:
        """(location, the Eventarc trigger) of event function `name`: exactly one."""
        found = [
            (key.split("/")[3], value)
            for key, value in self.fake.resources.items()
            if key.startswith(f"projects/{PROJECT}/locations/")
            and key.endswith(f"/triggers/{service_of(name)}")
        ]
        assert len(found) == 1, (name, [where for where, _ in found])
        return found[0]

    def members(self, resource: str, role: str) -> list[str]:
        """Who holds `role` on `resource` (its stored IAM policy)."""
        policy = self.fake.resources.get(f"{resource}:iam", {})
        return [m for b in policy.get("bindings", []) if b["role"] == role for m in b["members"]]


@pytest.fixture(scope="module")
def run_deploy(tmp_path_factory: pytest.TempPathFactory) -> RunDeploy:
    """`make deploy-run` in a copy of the project, against a fresh fake, then once more against
    what the first run made (the tests below read the state after both)."""
    work = tmp_path_factory.mktemp("deploy-run")
    project = copy_project(work / "project")
    (project / f".env.{PROJECT}").write_text("".join(f"{k}={v}\n" for k, v in ENV_FILE.items()))
    with RunningFake() as fake:
        fake.add_secret(PROJECT, "LINE_CHANNEL_SECRET", SECRET_VERSION)
        fake.resources[BUILD_ACCOUNT] = {"name": BUILD_ACCOUNT}  # gcloud run deploy describes it
        fake.resources[RUN_REPOSITORY] = {"name": RUN_REPOSITORY, "format": "DOCKER"}
        env = tool_env(fake, work / "home")
        env[gcloud_variable("api_endpoint_overrides/run")] = f"http://fake-google:{fake.port}/"
        env["HTTP_PROXY"] = env["http_proxy"] = fake.url
        runs = [
            subprocess.run(
                ["make", "deploy-run", f"PROJECT={PROJECT}", f"REGION={REGION}"],
                cwd=project,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=1200,
                start_new_session=True,
            )
            for _ in range(2)  # the second finds everything in place: it updates
        ]
    return RunDeploy(fake, runs[0], project, again=runs[1])


def test_make_deploy_run_succeeds_without_a_person(run_deploy: RunDeploy) -> None:
    """Exit 0 with no TTY; gcloud called nothing the fake lacks."""
    out = run_deploy.done.stdout[-4000:] + run_deploy.done.stderr[-4000:]
    assert run_deploy.done.returncode == 0, out
    assert run_deploy.fake.unknown == [], run_deploy.fake.unknown


def test_a_second_make_deploy_run_updates_what_exists(run_deploy: RunDeploy) -> None:
    """Run again, the plan updates each trigger (Eventarc keeps its subscription, which the
    plan finds again), job and queue in place, creating none twice."""
    out = run_deploy.again.stdout[-4000:] + run_deploy.again.stderr[-4000:]
    assert run_deploy.again.returncode == 0, out
    assert run_deploy.fake.unknown == [], run_deploy.fake.unknown
    triggers = [r for r in run_deploy.fake.requests if "/triggers" in r.path and
                "/operations/" not in r.path]  # fmt: skip
    assert len([r for r in triggers if r.method == "POST"]) == len(EVENT_FUNCTIONS)
    assert len([r for r in triggers if r.method == "PATCH"]) == len(EVENT_FUNCTIONS)
    assert len(run_deploy.fake.calls("POST", "/jobs")) == 1
    assert len(run_deploy.fake.calls("PATCH", "/jobs/")) == 1


def test_the_account_cloud_build_names_may_build(run_deploy: RunDeploy) -> None:
    """Before building, the deploy grants `roles/run.builder` to the account Cloud Build said it
    builds as (the fake answers as a newer project: the compute account), and to no other."""
    assert run_deploy.members(f"projects/{PROJECT}", "roles/run.builder") == [
        f"serviceAccount:{COMPUTE_BUILD_ACCOUNT}"
    ]


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_each_function_is_built_for_its_entry_point(run_deploy: RunDeploy, name: str) -> None:
    """The build names the entry point and the base image; the service runs as the runtime
    account with its region in its environment, and no signature type (Cloud Run reserves
    `FUNCTION_SIGNATURE_TYPE`; the plan leaves it to the platform)."""
    service = run_deploy.service(name)
    annotations = service["metadata"].get("annotations", {})
    assert (
        annotations.get("run.googleapis.com/build-function-target")
        == (MANIFEST[name]["entryPoint"])
    )
    assert (
        annotations.get("run.googleapis.com/build-base-image") == f"python3{sys.version_info.minor}"
    )  # the venv's (tools.runtime)
    spec = service["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == f"exactly-once-fn@{PROJECT}.iam.gserviceaccount.com"
    variables = {e["name"]: e.get("value") for e in spec["containers"][0].get("env", [])}
    assert "FUNCTION_SIGNATURE_TYPE" not in variables
    assert variables["FUNCTION_REGION"] == REGION
    for key, value in ENV_FILE.items():
        assert variables.get(key) == value, (name, key)


def test_the_upload_is_the_code_only(run_deploy: RunDeploy) -> None:
    """The archive `gcloud run deploy --source` builds (its own code, `.gcloudignore`)."""
    assert run_deploy.fake.uploads
    for archive in run_deploy.fake.uploads:
        with zipfile.ZipFile(io.BytesIO(archive)) as opened:
            names = opened.namelist()
        check_only_code([n for n in names if not n.endswith("/")])


@pytest.mark.parametrize("name", EVENT_FUNCTIONS)
def test_each_event_function_has_its_trigger(run_deploy: RunDeploy, name: str) -> None:
    """One Eventarc trigger to the function's service, as the runtime account, for its event
    type, where its events come from: the database's location for Firestore (protobuf data),
    the bucket's for Storage, `global` for Firebase Alerts, its topic for Pub/Sub."""
    where, trigger = run_deploy.trigger(name)
    event = MANIFEST[name]["eventTrigger"]
    assert trigger["destination"]["cloudRun"] == {"service": service_of(name), "region": REGION}
    assert trigger["serviceAccount"] == RUN_ACCOUNT
    filters = {f["attribute"]: f["value"] for f in trigger["eventFilters"]}
    assert filters["type"] == event["eventType"]
    if event["eventType"].startswith("google.cloud.firestore."):
        assert where == FIRESTORE_LOCATION
        assert trigger["eventDataContentType"] == "application/protobuf"
    elif event["eventType"].startswith("google.cloud.storage."):
        assert where == BUCKET_LOCATION.lower()
    elif event["eventType"].startswith("google.firebase.firebasealerts."):
        assert where == "global"
    topic = trigger_topic(MANIFEST[name])
    if topic is not None:
        assert trigger["transport"]["pubsub"]["topic"] == f"projects/{PROJECT}/topics/{topic}"


@pytest.mark.parametrize("name", EVENT_FUNCTIONS)
def test_each_trigger_subscription_dead_letters_after_the_computed_attempts(
    run_deploy: RunDeploy, name: str
) -> None:
    """The subscription Eventarc made for the trigger (found, as the plan finds it, through the
    trigger) waits the function's timeout for an answer, backs off 10-600 s, and moves an event
    to the function's dead-letter topic only after the attempts computed from the lease and the
    timeout of the deployed env files; that topic has a subscription that keeps what lands
    there, and the Pub/Sub service agent may publish to it and ack the source."""
    _, trigger = run_deploy.trigger(name)
    subscription = run_deploy.stored(trigger["transport"]["pubsub"]["subscription"])
    timeout = int(MANIFEST[name]["timeoutSeconds"])
    config = DedupConfig.from_env(
        deploy_env(Target(project=PROJECT, region=REGION, source=run_deploy.project)),
        function_timeout_seconds=timeout,
    )
    dead_topic = f"projects/{PROJECT}/topics/{service_of(name)}-dead-letter"
    assert subscription["ackDeadlineSeconds"] == max(timeout, 10)
    assert subscription["retryPolicy"] == {"minimumBackoff": "10s", "maximumBackoff": "600s"}
    assert subscription["deadLetterPolicy"] == {
        "deadLetterTopic": dead_topic,
        "maxDeliveryAttempts": delivery_attempts(
            config.lease_seconds, timeout, config.max_attempts
        ),
    }
    assert subscription["deadLetterPolicy"]["maxDeliveryAttempts"] > 5
    reader = run_deploy.stored(f"projects/{PROJECT}/subscriptions/{service_of(name)}-dead-letter")
    assert reader["topic"] == dead_topic
    assert reader.get("expirationPolicy") == {}  # never expires
    assert PUBSUB_AGENT in run_deploy.members(dead_topic, "roles/pubsub.publisher")
    assert PUBSUB_AGENT in run_deploy.members(subscription["name"], "roles/pubsub.subscriber")


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_who_may_invoke_each_service(run_deploy: RunDeploy, name: str) -> None:
    """An HTTP or callable function is public, as on the other paths; every other service is
    called by its trigger, the scheduler or its queue as the runtime account, and by no one
    else."""
    service = f"projects/{PROJECT}/locations/{REGION}/services/{service_of(name)}"
    invokers = run_deploy.members(service, "roles/run.invoker")
    if "httpsTrigger" in MANIFEST[name] or "callableTrigger" in MANIFEST[name]:
        assert invokers == ["allUsers"]
    else:
        assert invokers == [f"serviceAccount:{RUN_ACCOUNT}"]


def test_the_schedule_posts_to_the_run_app_url_with_an_oidc_token(run_deploy: RunDeploy) -> None:
    """daily_digest's Cloud Scheduler job targets its service's run.app URL with an OIDC
    token of the runtime account for that audience."""
    job = run_deploy.stored(
        f"projects/{PROJECT}/locations/{REGION}/jobs/firebase-schedule-daily_digest-{REGION}"
    )
    target = job["httpTarget"]
    assert target["uri"] == run_url("daily_digest")
    assert target["httpMethod"] == "POST"
    assert target["oidcToken"] == {
        "serviceAccountEmail": RUN_ACCOUNT,
        "audience": run_url("daily_digest"),
    }


def test_the_task_queue_is_routed_to_the_run_app_url(run_deploy: RunDeploy) -> None:
    """indexPost's queue sends every task to its service's run.app host with an OIDC token."""
    queue = run_deploy.stored(f"projects/{PROJECT}/locations/{REGION}/queues/indexPost")
    target = queue["httpTarget"]
    host = run_url("indexPost").removeprefix("https://")
    assert target["uriOverride"]["host"] == host
    assert target["uriOverride"]["scheme"] == "HTTPS"
    assert target["oidcToken"] == {
        "serviceAccountEmail": RUN_ACCOUNT,
        "audience": run_url("indexPost"),
    }


@pytest.mark.parametrize(
    "name", sorted(n for n, e in MANIFEST.items() if "httpsTrigger" in e or "callableTrigger" in e)
)
def test_each_public_function_url_is_printed(run_deploy: RunDeploy, name: str) -> None:
    """No cloudfunctions.net URL on this path: the run.app URL is printed."""
    assert f"{name}: {run_url(name)}" in run_deploy.done.stdout.splitlines()
