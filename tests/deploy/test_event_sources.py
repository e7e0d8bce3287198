"""The Storage, Firebase Alerts and schedule functions' deploy plans, as `make -n
deploy-gcloud` and `make bootstrap` print them, and the manifest `make deploy-firebase` hands
the Firebase CLI: the bucket, the alert's filters, and one Cloud Scheduler job whose settings
are the ones firebase-tools gives the job it creates from the same manifest."""

from __future__ import annotations

import pytest

from tests.deploy.conftest import ROOT
from tests.deploy.test_deploy import (
    BUCKET,
    BUCKET_LOCATION,
    PROJECT,
    REGION,
    make_commands,
    manifest_of,
)
from tools.deploy.manifest import deploy_manifest, sdk_manifest
from tools.deploy.target import DeployError, Target, serves

ACCOUNT = f"exactly-once-fn@{PROJECT}.iam.gserviceaccount.com"
JOB = f"firebase-schedule-daily_digest-{REGION}"


def test_the_firebase_manifest_has_the_bucket_the_zone_and_retries() -> None:
    """Storage and alert triggers retry; the bucket and time zone are resolved, no param left."""
    manifest = manifest_of(ROOT)
    endpoints = manifest["endpoints"]
    upload = endpoints["register_upload"]["eventTrigger"]
    assert upload["eventFilters"] == {"bucket": BUCKET}
    assert upload["retry"] is True
    assert upload["region"] == BUCKET_LOCATION.lower()
    alert = endpoints["alert_new_fatal_issue"]["eventTrigger"]
    assert alert["eventFilters"] == {"alerttype": "crashlytics.newFatalIssue"}
    assert alert["retry"] is True
    assert alert["region"] == "global"
    schedule = endpoints["daily_digest"]["scheduleTrigger"]
    assert schedule["schedule"] == "0 8 * * *"
    assert schedule["timeZone"] == "UTC"
    assert schedule["retryConfig"]["retryCount"] >= 1
    assert "params" not in manifest


def test_gcloud_creates_or_updates_the_job_firebase_would() -> None:
    """One job, named as firebase-tools names it, with the cron, zone, retries, a deadline no
    shorter than the timeout and an OIDC token for the runtime account, whichever branch runs."""
    commands = [c for c in make_commands(ROOT, "deploy-gcloud") if c[1:3] == ["scheduler", "jobs"]]
    verbs = sorted(c[3] for c in commands)
    assert verbs == ["create", "describe", "update"], commands
    timeout = manifest_of(ROOT)["endpoints"]["daily_digest"]["timeoutSeconds"]
    for command in commands:
        assert JOB in command
        assert f"--location={REGION}" in command
        if command[3] == "describe":
            continue
        assert command[4] == "http"
        assert {
            "--schedule=0 8 * * *", "--time-zone=UTC", "--max-retry-attempts=3",
            "--http-method=POST", f"--oidc-service-account-email={ACCOUNT}",
        } <= set(command), command  # fmt: skip
        deadline = next(w for w in command if w.startswith("--attempt-deadline="))
        assert int(deadline.split("=")[1].rstrip("s")) >= timeout


def test_bootstrap_grants_the_storage_agent_and_enables_the_sources() -> None:
    """The Storage service agent may publish; Scheduler, Storage and Alerts APIs are on."""
    lines = [" ".join(c) for c in make_commands(ROOT, "bootstrap")]
    agent = "service-123456789012@gs-project-accounts.iam.gserviceaccount.com"
    assert any(agent in line and "--role=roles/pubsub.publisher" in line for line in lines)
    for api in ("cloudscheduler", "storage", "firebasealerts"):
        assert any(f"{api}.googleapis.com" in line for line in lines), api


@pytest.mark.parametrize(
    ("region", "location", "served"),
    [
        ("europe-west1", "eu", True),
        ("us-central1", "eu", False),
        ("us-east1", "nam4", True),
        ("us-west1", "nam4", False),
        ("asia-south1", "asia-south1", True),
        ("europe-west1", "europe-west4", False),
    ],
)
def test_a_region_serves_only_its_buckets(region: str, location: str, served: bool) -> None:
    """A Storage trigger sits in the bucket's region or inside its multi-region."""
    assert serves(region, location) is served


def test_a_region_that_cannot_serve_the_bucket_stops_the_plan() -> None:
    """The deploy stops before anything, naming the bucket, its location and REGION."""
    target = Target(
        project=PROJECT, region="us-central1", firestore_location="nam5", bucket_location="EU"
    )
    with pytest.raises(DeployError, match=r"is in eu, which REGION=us-central1 cannot"):
        deploy_manifest(sdk_manifest(ROOT), target, {})


def test_the_env_files_name_the_bucket_and_the_time_zone() -> None:
    """UPLOAD_BUCKET and DIGEST_TIME_ZONE from the env files reach both paths' manifest."""
    target = Target(project=PROJECT, region=REGION, firestore_location="nam5",
                    bucket_location="EU")  # fmt: skip
    env = {"UPLOAD_BUCKET": f"{PROJECT}.appspot.com", "DIGEST_TIME_ZONE": "Europe/Paris"}
    manifest = deploy_manifest(sdk_manifest(ROOT), target, env)
    endpoints = manifest["endpoints"]
    assert endpoints["register_upload"]["eventTrigger"]["eventFilters"]["bucket"] == (
        f"{PROJECT}.appspot.com"
    )
    assert endpoints["daily_digest"]["scheduleTrigger"]["timeZone"] == "Europe/Paris"
