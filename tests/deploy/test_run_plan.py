"""`make deploy-run`: the Cloud Run functions plan, from the manifest the other paths deploy.

The dry run is run exactly as a user types it (`make -n`, an empty gcloud configuration, a
`gcloud` on PATH that fails and records any call); the rules the plan is built from (service
names, ack deadlines, delivery attempts, env files) are checked on their own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dedup.config import DedupConfig
from tests.deploy.conftest import ROOT
from tests.deploy.test_dry_run import dry_run
from tools.deploy.manifest import endpoints, sdk_manifest
from tools.deploy.target import DeployError, Target
from tools.deploy_run import service_environment
from tools.run_service import (
    MAX_DELIVERY_ATTEMPTS,
    ack_deadline,
    backoff_gaps,
    delivery_attempts,
    run_env_files,
    service_name,
)

MANIFEST = dict(endpoints(sdk_manifest(ROOT)))
EVENT_FUNCTIONS = sorted(n for n, e in MANIFEST.items() if e.get("eventTrigger") is not None)
CONTRACT = [
    "deploy-run", "PROJECT=demo-x", "REGION=europe-west1", "FIRESTORE_LOCATION=eur3",
    "BUCKET_LOCATION=EU", "PROJECT_NUMBER=123456", "SECRET_VERSIONS=LINE_CHANNEL_SECRET=1",
]  # fmt: skip


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The lines `make -n deploy-run` prints with the contract's settings, no account."""
    done = dry_run(tmp_path_factory.mktemp("run"), *CONTRACT, spy=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "error" not in done.stderr, done.stderr
    return done.stdout.splitlines()


def only(lines: list[str], start: str) -> str:
    found = [line for line in lines if line.startswith(start)]
    assert len(found) == 1, (start, found)
    return found[0]


@pytest.mark.subprocesses
@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_one_run_deploy_per_function(planned: list[str], name: str) -> None:
    """`gcloud run deploy <service>` with its entry point, the base image, its region, its
    shape, its account, its env file and its access."""
    endpoint = MANIFEST[name]
    service = endpoint["entryPoint"].lower().replace("_", "-")
    line = only(planned, f"gcloud run deploy {service} ")
    words = line.split()
    assert f"--function={endpoint['entryPoint']}" in words
    assert f"--base-image=python3{sys.version_info.minor}" in words  # the venv's
    assert "--source=." in words
    assert "--region=europe-west1" in words
    for flag in ("--memory=", "--cpu=", "--concurrency=", "--min-instances=",
                 "--max-instances=", f"--timeout={endpoint['timeoutSeconds']}s"):  # fmt: skip
        assert any(w.startswith(flag) for w in words), (name, flag)
    assert "--service-account=exactly-once-fn@demo-x.iam.gserviceaccount.com" in words
    assert f"--env-vars-file=.cache/deploy/demo-x/run/{name}.env.yaml" in words
    public = "httpsTrigger" in endpoint or "callableTrigger" in endpoint
    assert ("--allow-unauthenticated" in words) == public
    if public:
        only(planned, f"echo '{name}: https://{service}-123456.europe-west1.run.app'")


@pytest.mark.subprocesses
@pytest.mark.parametrize("name", EVENT_FUNCTIONS)
def test_event_function_trigger_and_dead_letters(planned: list[str], name: str) -> None:
    """An Eventarc trigger to its service, where its events come from, and its subscription's
    ack deadline, backoff and dead-letter policy."""
    service = MANIFEST[name]["entryPoint"].lower().replace("_", "-")
    trigger = only(planned, f"if gcloud eventarc triggers describe {service} ")
    assert f"gcloud eventarc triggers create {service} " in trigger
    assert f"--destination-run-service={service} " in trigger
    location = {"relay_outbox": "eur3", "send_post_notification": "eur3",
                "sync_published_count": "eur3", "fulfil_order": "eur3", "register_upload": "eu",
                "alert_new_fatal_issue": "global"}.get(name, "europe-west1")  # fmt: skip
    assert f"--location={location} " in trigger
    if location == "eur3":
        assert "--event-data-content-type=application/protobuf" in trigger
    if name == "forward_webhook":
        assert "--transport-topic=projects/demo-x/topics/webhooks" in trigger
    update = [line for line in planned if line.startswith("gcloud pubsub subscriptions update")
              and f"triggers describe {service} " in line]  # fmt: skip
    assert len(update) == 1, update
    assert f"--dead-letter-topic=projects/demo-x/topics/{service}-dead-letter" in update[0]
    assert "--max-delivery-attempts=" in update[0]
    assert "--max-delivery-attempts=5 " not in update[0]
    assert f"--ack-deadline={MANIFEST[name]['timeoutSeconds']} " in update[0]
    only(planned, f"gcloud pubsub subscriptions describe {service}-dead-letter ")


@pytest.mark.subprocesses
def test_schedule_and_queue_go_to_the_run_app_url(planned: list[str]) -> None:
    """The schedule's job and the task queue call the services' run.app URLs with OIDC."""
    job = only(planned, "if gcloud scheduler jobs describe firebase-schedule-daily_digest-")
    assert "gcloud scheduler jobs create http" in job
    assert "--uri=https://daily-digest-123456.europe-west1.run.app " in job
    assert "--oidc-service-account-email=exactly-once-fn@demo-x.iam.gserviceaccount.com" in job
    queue = only(planned, "gcloud tasks queues update indexPost ")
    assert "--http-uri-override=scheme:https,host:indexpost-123456.europe-west1.run.app" in queue
    assert "--http-oidc-service-account-email-override=exactly-once-fn@" in queue


def test_service_names_follow_cloud_runs_rules() -> None:
    """Lowercased, `_` -> `-`; a name Cloud Run refuses is refused naming the function."""
    assert service_name("sync_published_count", "sync_published_count") == ("sync-published-count")
    assert service_name("indexPost", "indexPost") == "indexpost"
    with pytest.raises(DeployError, match="f_long"):
        service_name("f_long", "f" * 64)
    with pytest.raises(DeployError, match="trailing_"):
        service_name("trailing_", "trailing_")
    with pytest.raises(DeployError, match="_lead"):
        service_name("_lead", "_lead")


def test_timeout_beyond_the_ack_deadline_is_refused_naming_the_function() -> None:
    """Pub/Sub waits at most 600 s for a push's answer."""
    assert ack_deadline("f", 540) == 540
    assert ack_deadline("f", 3) == 10
    with pytest.raises(DeployError, match="slow_fn has a timeout of 601 s"):
        ack_deadline("slow_fn", 601)


def test_delivery_attempts_outlast_the_lease_and_the_timeout() -> None:
    """The backoff delays of the attempts beyond the first span lease + timeout, plus one
    attempt per handler start dedup allows; never 5 with the default settings."""
    assert backoff_gaps(110) == 4  # 10 + 20 + 40 + 80 = 150 >= 110
    assert backoff_gaps(150) == 4
    assert backoff_gaps(151) == 5
    assert delivery_attempts(60, 50, 10) == 1 + 4 + 10
    assert delivery_attempts(1, 1, 1) == 5  # Pub/Sub's least
    assert delivery_attempts(3600, 540, 100) == MAX_DELIVERY_ATTEMPTS


def test_env_files_name_the_firebase_config_and_no_signature_type() -> None:
    """GCLOUD_PROJECT, FUNCTION_REGION and FIREBASE_CONFIG; no FUNCTION_SIGNATURE_TYPE, which
    Cloud Run reserves (functions-framework reads each function's from its registration)."""
    target = Target(project="demo-x", region="europe-west1")
    files = run_env_files(target, {"UPLOAD_BUCKET": ""})
    assert set(files) == {"cloudevent", "http", "asgi-cloudevent", "asgi-http"}
    for values in files.values():
        assert "FUNCTION_SIGNATURE_TYPE" not in values
        assert values["GCLOUD_PROJECT"] == "demo-x"
        assert values["FUNCTION_REGION"] == "europe-west1"
        assert json.loads(values["FIREBASE_CONFIG"]) == {
            "projectId": "demo-x", "storageBucket": "demo-x.firebasestorage.app",
        }  # fmt: skip


def test_event_functions_answer_500_to_an_event_given_up_on() -> None:
    """Every event function has a dead-letter topic on this path, so its env file sets
    DEDUP_ON_GIVE_UP=nack (a given-up event ends there); HTTP, scheduled and task functions
    keep the default. A value the project's env files set is kept."""
    target = Target(project="demo-x", region="europe-west1")
    files = run_env_files(target, {})
    assert files["cloudevent"]["DEDUP_ON_GIVE_UP"] == "nack"
    assert files["asgi-cloudevent"]["DEDUP_ON_GIVE_UP"] == "nack"
    assert "DEDUP_ON_GIVE_UP" not in files["http"]
    assert "DEDUP_ON_GIVE_UP" not in files["asgi-http"]
    chosen = run_env_files(target, {"DEDUP_ON_GIVE_UP": "ack"})
    assert chosen["cloudevent"]["DEDUP_ON_GIVE_UP"] == "ack"
    for name in EVENT_FUNCTIONS:
        served = service_environment(name, target)
        assert DedupConfig.from_env(served).on_give_up == "nack", name


def test_service_environment_is_the_env_file_and_the_target(tmp_path: Path) -> None:
    """What the served-as-the-buildpack test gives functions-framework."""
    env = service_environment("sync_published_count", Target(project="p", region="europe-west1"))
    assert env["FUNCTION_TARGET"] == "sync_published_count"
    assert "FUNCTION_SIGNATURE_TYPE" not in env
