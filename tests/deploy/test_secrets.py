"""Secrets on the gcloud path are pinned, as firebase-tools pins them: to the version that is the
latest when the deploy runs (firebase-tools' `validateSecretVersions` resolves `latest` and
deploys that number). `make deploy-gcloud` never mounts `latest`, which Cloud Run would resolve
again at each instance start.

The version is read when the plan runs (`make -n deploy-gcloud` only prints the read), with
`gcloud secrets versions describe latest`; here gcloud is either the real one without
credentials (the read fails, the deploy stops naming the secret before anything is deployed) or
a script that answers as gcloud's `--format=value(name,state)` does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.conftest import ROOT
from tests.deploy.test_deploy import LOCATION, WHERE, expanded, needs_gcloud, run_reads

SECRET = "LINE_CHANNEL_SECRET"  # receive_line_webhook's


def plan(env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    """`python -m tools.deploy plan deploy-gcloud` with `env`."""
    return subprocess.run(
        [sys.executable, "-m", "tools.deploy", "plan", "deploy-gcloud", *WHERE,
         f"--firestore-location={LOCATION}", "--bucket-location=EU", *extra],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip


def secret_flags(stdout: str) -> set[str]:
    return {w for line in stdout.splitlines() for w in line.split() if "--set-secrets" in w}


def fake_gcloud(tmp_path: Path, answer: str) -> dict[str, str]:
    """An environment whose `gcloud` prints `answer` (name, tab, state)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "gcloud"
    script.write_text(f"#!/bin/sh\nprintf '{answer}\\n'\n")
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def deploy_of(stdout: str, function: str) -> str:
    """The planned `gcloud functions deploy` of `function`."""
    return next(
        line
        for line in stdout.splitlines()
        if line.startswith(f"gcloud functions deploy {function} ")
    )


def test_a_pinned_version_is_mounted_never_latest() -> None:
    done = plan(dict(os.environ), f"--secret-versions={SECRET}=3")
    assert done.returncode == 0, done.stderr
    assert secret_flags(done.stdout) == {f"--set-secrets={SECRET}={SECRET}:3"}
    assert ":latest" not in done.stdout
    assert "tools.deploy read" not in done.stdout  # nothing left to read at deploy time


def test_the_latest_enabled_version_is_read_at_deploy_time_and_pinned(tmp_path: Path) -> None:
    """The plan itself asks gcloud nothing; its read, run, pins the version gcloud names."""
    done = plan({**os.environ, "PATH": "/nonexistent"})  # no gcloud at all while planning
    assert done.returncode == 0, done.stderr
    assert "tools.deploy read secret-version" in done.stdout
    env = fake_gcloud(tmp_path, f"projects/123/secrets/{SECRET}/versions/7\\tENABLED")
    assert run_reads(done.stdout, ROOT, env).returncode == 0
    command = expanded(deploy_of(done.stdout, "receive_line_webhook"), ROOT)
    assert f"--set-secrets={SECRET}={SECRET}:7" in command


@pytest.mark.parametrize("state", ["DISABLED", "DESTROYED"])
def test_a_latest_version_that_is_not_enabled_is_refused(tmp_path: Path, state: str) -> None:
    env = fake_gcloud(tmp_path, f"projects/123/secrets/{SECRET}/versions/7\\t{state}")
    done = run_reads(plan(env).stdout, ROOT, env)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: the latest version of secret {SECRET} is {state}")
    assert done.stdout == ""


@needs_gcloud
def test_an_unreadable_secret_stops_the_deploy_and_says_how_to_pin_it(tmp_path: Path) -> None:
    """No credentials: the real gcloud cannot read the secret; the deploy stops at the read."""
    env = {**os.environ, "CLOUDSDK_CONFIG": str(tmp_path), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"}
    done = run_reads(plan(env).stdout, ROOT, env)
    assert done.returncode == 2
    assert f"could not read the latest version of secret {SECRET}" in done.stderr
    assert f'SECRET_VERSIONS="{SECRET}=1"' in done.stderr
    assert done.stdout == ""
