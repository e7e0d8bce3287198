"""Each function's deployed timeout is in its environment, on the gcloud and Cloud Run paths.

`make -n deploy-gcloud` and `make -n deploy-run` print, for every function, the deploy with its
`--timeout` and its `--env-vars-file`; the env files those plans write (`tools.deploy
env-files`, `tools.deploy_run env-files`, commands the plans run first) hold
`DEDUP_FUNCTION_TIMEOUT_SECONDS` equal to that `--timeout`, so that the function's deliveries
have its own timeout as their time budget (`dedup.config.DedupConfig.time_budget`). A project
copy adds a function with a timeout of its own (20 s) beside the global 50 s. One value in
`.env` would be every function's: the plans refuse it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.conftest import add_function

pytestmark = pytest.mark.subprocesses

SHORT_JOB = '''"""A function whose timeout is its own (20 s), not the global one."""

from typing import Any

from firebase_functions import pubsub_fn

from dedup import Delivery, trigger_once


@pubsub_fn.on_message_published(topic="short-jobs", timeout_sec=20)
@trigger_once("shortJob")
def short_job(event: Any, delivery: Delivery) -> None:
    """No effect."""
'''
SETTINGS = (
    "PROJECT=demo-x", "REGION=europe-west1", "FIRESTORE_LOCATION=eur3", "BUCKET_LOCATION=EU",
    "SECRET_VERSIONS=LINE_CHANNEL_SECRET=4", "PROJECT_NUMBER=123456",
)  # fmt: skip
"""Every value the plans would otherwise read at deploy time, so that they ask gcloud nothing."""
VARIABLE = "DEDUP_FUNCTION_TIMEOUT_SECONDS"


def make_n(project: Path, target: str) -> subprocess.CompletedProcess[str]:
    """`make -n TARGET` in `project` with no gcloud account."""
    config = project.parent / "gcloud-config"
    config.mkdir(exist_ok=True)
    env = {**os.environ, "CLOUDSDK_CONFIG": str(config)}
    return subprocess.run(
        ["make", "-n", target, *SETTINGS], cwd=project, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def deployed(project: Path, target: str, deploy: str) -> dict[str, tuple[str, dict[str, str]]]:
    """Run the env-files command `make -n TARGET` prints, as the deploy would; then, for each
    `DEPLOY` line (`gcloud functions deploy`, `gcloud run deploy`): the function or service ->
    its `--timeout` and the variables of its `--env-vars-file`."""
    done = make_n(project, target)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    [writes] = [line for line in lines if re.search(r" -m tools\.deploy(_run)? env-files ", line)]
    subprocess.run(writes, shell=True, cwd=project, check=True, capture_output=True)
    found = {}
    for line in lines:
        if not line.startswith(deploy):
            continue
        words = shlex.split(line)
        flags = dict(
            w.removeprefix("--").split("=", 1) for w in words if w.startswith("--") and "=" in w
        )
        variables = yaml.safe_load((project / flags["env-vars-file"]).read_text())
        found[words[len(deploy.split())]] = (flags["timeout"], variables)
    assert found, f"no {deploy!r} in the plan"
    return found


@pytest.mark.parametrize(
    ("target", "deploy", "short"),
    [
        ("deploy-gcloud", "gcloud functions deploy", "short_job"),
        ("deploy-run", "gcloud run deploy", "short-job"),
    ],
)
def test_each_function_gets_its_deployed_timeout_in_its_environment(
    project_copy: Path, target: str, deploy: str, short: str
) -> None:
    """For every function the plan deploys, its env file's DEDUP_FUNCTION_TIMEOUT_SECONDS is
    its `--timeout`: 20 for the function that declares its own, 50 (the global) for the rest."""
    add_function(project_copy, "short_job", SHORT_JOB, "short_job")
    functions = deployed(project_copy, target, deploy)
    for function, (timeout, variables) in functions.items():
        assert f"{variables.get(VARIABLE)}s" == timeout, (function, timeout, variables)
    assert functions[short][0] == "20s"
    assert {timeout for name, (timeout, _) in functions.items() if name != short} == {"50s"}


@pytest.mark.parametrize("target", ["deploy-gcloud", "deploy-run", "deploy-firebase"])
def test_a_function_timeout_in_the_env_files_is_refused(project_copy: Path, target: str) -> None:
    """DEDUP_FUNCTION_TIMEOUT_SECONDS in `.env` would give every function one time budget
    (firebase deploy hands `.env` to all of them): every deploy path refuses it, naming it."""
    (project_copy / ".env").write_text(f"{VARIABLE}=50\n")
    if target == "deploy-firebase":
        done = subprocess.run(
            ["venv/bin/python", "-m", "tools.deploy", "manifest", "functions.yaml",
             "--project=demo-x", "--region=europe-west1", "--firestore-location=eur3",
             "--bucket-location=EU"],
            cwd=project_copy, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    else:
        done = make_n(project_copy, target)
    assert done.returncode != 0, done.stdout
    assert f"{VARIABLE} is set in .env" in done.stderr, done.stderr
