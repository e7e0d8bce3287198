"""`make -n` prints each deploy's whole plan with no gcloud account and no network.

The values only the cloud knows (each secret's latest version, the database's and the bucket's
locations, the project's number) are read when the plan runs, by commands the plan prints
before the deploys (`tools.deploy read`), so planning asks gcloud nothing. The commands run here
exactly as the README types them, with an empty gcloud configuration (no account); a second
run puts a `gcloud` first on PATH that records every call, and none may come.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.deploy.conftest import ROOT
from tools.deploy.manifest import endpoints, sdk_manifest

pytestmark = pytest.mark.subprocesses

FUNCTIONS = [name for name, _ in endpoints(sdk_manifest(ROOT))]
"""Every function main.py exports, by its deployed name, as tools/deploy's manifest has it."""


def dry_run(tmp_path: Path, *command: str, spy: bool = False) -> subprocess.CompletedProcess[str]:
    """`env CLOUDSDK_CONFIG=$(mktemp -d) make -n COMMAND` in the worktree; with `spy`, a
    `gcloud` that records its calls and fails comes first on PATH."""
    config = tmp_path / "gcloud-config"
    config.mkdir()
    env = {**os.environ, "CLOUDSDK_CONFIG": str(config)}
    if spy:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "gcloud").write_text(
            f'#!/bin/sh\necho "$*" >> {tmp_path}/gcloud-calls\nexit 1\n'
        )
        (bin_dir / "gcloud").chmod(0o755)
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
    done = subprocess.run(
        ["make", "-n", *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert not (tmp_path / "gcloud-calls").exists(), (tmp_path / "gcloud-calls").read_text()
    return done


def line_of(lines: list[str], function: str) -> str:
    """The one planned `gcloud functions deploy` of `function`."""
    found = [line for line in lines if line.startswith(f"gcloud functions deploy {function} ")]
    assert len(found) == 1, (function, found)
    return found[0]


@pytest.mark.parametrize("spy", [False, True], ids=["no-account", "no-gcloud-call"])
def test_make_n_deploy_gcloud_prints_every_function_without_credentials(
    tmp_path: Path, spy: bool
) -> None:
    """Exit 0, one deploy per exported function, the bucket, alert and schedule triggers, and
    the reads of the deploy-time values printed before the first deploy."""
    done = dry_run(tmp_path, "deploy-gcloud", "PROJECT=x", "REGION=y", spy=spy)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "error" not in done.stderr, done.stderr
    assert "exit 2" not in done.stdout.splitlines()  # a refused plan
    lines = done.stdout.splitlines()
    deploys = [line for line in lines if line.startswith("gcloud functions deploy ")]
    assert sorted(line.split()[3] for line in deploys) == sorted(FUNCTIONS)
    for function in FUNCTIONS:
        line_of(lines, function)
    assert "--trigger-bucket=" in line_of(lines, "register_upload")
    assert "alerttype=crashlytics.newFatalIssue" in line_of(lines, "alert_new_fatal_issue")
    jobs = [line for line in lines if "gcloud scheduler jobs" in line]
    assert jobs
    assert all("0 8 * * *" in line for line in jobs), jobs
    first_deploy = lines.index(deploys[0])
    reads = [line for line in lines if " -m tools.deploy read " in line]
    assert {line.split()[4] for line in reads} == {
        "firestore-location", "bucket-location", "secret-version",
    }  # fmt: skip
    assert all(lines.index(line) < first_deploy for line in reads)


def test_values_given_explicitly_are_used_as_they_are(tmp_path: Path) -> None:
    """SECRET_VERSIONS, FIRESTORE_LOCATION and BUCKET_LOCATION leave nothing to read."""
    done = dry_run(
        tmp_path, "deploy-gcloud", "PROJECT=x", "REGION=europe-west1", "FIRESTORE_LOCATION=eur3",
        "BUCKET_LOCATION=EU", "SECRET_VERSIONS=LINE_CHANNEL_SECRET=4", spy=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "tools.deploy read" not in done.stdout
    assert "$(cat " not in done.stdout
    lines = done.stdout.splitlines()
    assert "--trigger-location=eu " in line_of(lines, "register_upload")
    assert "--trigger-location=eur3 " in line_of(lines, "relay_outbox")
    assert "LINE_CHANNEL_SECRET:4 " in line_of(lines, "receive_line_webhook")


def test_a_region_that_cannot_serve_a_given_bucket_location_stops_the_dry_run(
    tmp_path: Path,
) -> None:
    """A BUCKET_LOCATION given explicitly is checked while planning, as before, and the refused
    plan fails `make -n` too."""
    done = dry_run(
        tmp_path, "deploy-gcloud", "PROJECT=x", "REGION=us-central1", "BUCKET_LOCATION=EU",
        spy=True,
    )  # fmt: skip
    assert done.returncode != 0
    assert "bucket x.firebasestorage.app is in eu, which REGION=us-central1" in done.stderr
    assert "gcloud functions deploy" not in done.stdout


def test_make_n_bootstrap_reads_the_project_number_when_it_runs(tmp_path: Path) -> None:
    """The service agents' members name the number the plan reads before it grants them."""
    done = dry_run(tmp_path, "bootstrap", "PROJECT=x", spy=True)
    assert done.returncode == 0, done.stderr
    assert "error" not in done.stderr, done.stderr
    assert " -m tools.deploy read project-number " in done.stdout
    assert "service-$(cat .cache/deploy/x/at-deploy/project-number-x)@gcp-sa-pubsub" in (
        done.stdout
    )


@pytest.mark.parametrize("spy", [False, True], ids=["no-account", "no-gcloud-call"])
def test_make_n_deploy_firebase_prints_the_whole_plan_without_credentials(
    tmp_path: Path, spy: bool
) -> None:
    """The topics, the manifest (whose database and bucket locations are read when it is
    written, at deploy time) and the firebase deploy itself."""
    done = dry_run(tmp_path, "deploy-firebase", "PROJECT=x", spy=spy)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "error" not in done.stderr, done.stderr
    assert "exit 2" not in done.stdout.splitlines()  # a refused plan
    assert "gcloud pubsub topics describe webhooks --project=x" in done.stdout
    assert "-m tools.deploy manifest functions.yaml --project=x" in done.stdout
    assert "firebase deploy --only functions,firestore --project x" in done.stdout
