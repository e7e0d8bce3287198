"""Secrets on the gcloud path are pinned, as firebase-tools pins them: to the version that is the
latest when the deploy runs (firebase-tools' `validateSecretVersions` resolves `latest` and
deploys that number). `make deploy-gcloud` never mounts `latest`, which Cloud Run would resolve
again at each instance start.

The version is read with `gcloud secrets versions describe latest`; here gcloud is either the
real one without credentials (the read fails, the deploy stops naming the secret) or a script
that answers as gcloud's `--format=value(name,state)` does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.conftest import ROOT
from tests.deploy.test_deploy import LOCATION, WHERE, needs_gcloud

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


def test_a_pinned_version_is_mounted_never_latest() -> None:
    done = plan(dict(os.environ), f"--secret-versions={SECRET}=3")
    assert done.returncode == 0, done.stderr
    assert secret_flags(done.stdout) == {f"--set-secrets={SECRET}={SECRET}:3"}
    assert ":latest" not in done.stdout


def test_the_latest_enabled_version_is_read_and_pinned(tmp_path: Path) -> None:
    env = fake_gcloud(tmp_path, f"projects/123/secrets/{SECRET}/versions/7\\tENABLED")
    done = plan(env)
    assert done.returncode == 0, done.stderr
    assert secret_flags(done.stdout) == {f"--set-secrets={SECRET}={SECRET}:7"}


@pytest.mark.parametrize("state", ["DISABLED", "DESTROYED"])
def test_a_latest_version_that_is_not_enabled_is_refused(tmp_path: Path, state: str) -> None:
    env = fake_gcloud(tmp_path, f"projects/123/secrets/{SECRET}/versions/7\\t{state}")
    done = plan(env)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: the latest version of secret {SECRET} is {state}")
    assert done.stdout == ""


@needs_gcloud
def test_an_unreadable_secret_stops_the_deploy_and_says_how_to_pin_it(tmp_path: Path) -> None:
    """No credentials: the real gcloud cannot read the secret; nothing is planned."""
    env = {**os.environ, "CLOUDSDK_CONFIG": str(tmp_path), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"}
    done = plan(env)
    assert done.returncode == 2
    assert f"could not read the latest version of secret {SECRET}" in done.stderr
    assert f'SECRET_VERSIONS="{SECRET}=1"' in done.stderr
    assert done.stdout == ""
