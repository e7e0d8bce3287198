"""The account Cloud Build builds with gets `roles/run.builder`, whichever it is.

`make bootstrap` and `make deploy-run` ask `gcloud builds get-default-service-account` and
grant the account it names (`tools.run_build`). Here the plan's own lines run with the real
gcloud against the fake of Google's APIs, which answers as a newer project does (the Compute
Engine default account) or as an older one does (the legacy Cloud Build account); the
project's IAM policy then names exactly that account, and never the other.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.deploy.fake_google import (
    COMPUTE_BUILD_ACCOUNT,
    LEGACY_BUILD_ACCOUNT,
    RunningFake,
)
from tests.deploy.test_dry_run import dry_run
from tests.deploy.test_real_deploy import PROJECT, tool_env
from tools.deploy.target import Target
from tools.run_build import BUILDER_ROLE, builder_grant

pytestmark = pytest.mark.deploy_harness
REGION = "europe-west1"


@pytest.mark.parametrize(
    "account", [COMPUTE_BUILD_ACCOUNT, LEGACY_BUILD_ACCOUNT], ids=["compute", "legacy"]
)
def test_the_account_cloud_build_names_is_the_one_granted(tmp_path: Path, account: str) -> None:
    """Run with gcloud against a project whose Cloud Build builds as `account`, the plan's
    ask-then-grant gives `account`, and only it, `roles/run.builder`."""
    with RunningFake() as fake:
        fake.build_account = account
        env = tool_env(fake, tmp_path / "home")
        for line in builder_grant(Target(project=PROJECT, region=REGION, source=tmp_path)):
            done = subprocess.run(
                ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                timeout=120, check=False,
            )  # fmt: skip
            assert done.returncode == 0, (line, done.stderr[-2000:])
        policy = fake.resources.get(f"projects/{PROJECT}:iam", {})
    granted = [
        m for b in policy.get("bindings", []) if b["role"] == BUILDER_ROLE for m in b["members"]
    ]
    assert granted == [f"serviceAccount:{account}"]
    assert fake.calls("GET", f"projects/{PROJECT}/locations/{REGION}/defaultServiceAccount")


@pytest.mark.parametrize("target", ["deploy-run", "bootstrap"])
def test_make_n_asks_cloud_build_before_it_grants_the_builder_role(
    tmp_path: Path, target: str
) -> None:
    """`make -n deploy-run` (before its first `gcloud run deploy`) and `make -n bootstrap`
    (after the APIs are enabled) ask `gcloud builds get-default-service-account`, then grant the
    account it wrote `roles/run.builder`; neither names the compute account."""
    done = dry_run(
        tmp_path, target, f"PROJECT={PROJECT}", f"REGION={REGION}", "PROJECT_NUMBER=123456",
        "SECRET_VERSIONS=LINE_CHANNEL_SECRET=1", spy=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    ask = next(
        i for i, line in enumerate(lines) if "gcloud builds get-default-service-account" in line
    )
    grant = next(i for i, line in enumerate(lines) if f"--role={BUILDER_ROLE}" in line)
    answer = lines[ask].rpartition(" >")[2].strip()
    assert ask < grant
    assert f'"--member=serviceAccount:$(cat {answer})"' in lines[grant]
    if target == "deploy-run":
        assert grant < next(
            i for i, line in enumerate(lines) if line.startswith("gcloud run deploy")
        )
    else:
        assert (
            next(i for i, line in enumerate(lines) if "gcloud services enable run." in line) < ask
        )
    assert "-compute@" not in done.stdout
