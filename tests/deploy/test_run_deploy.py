"""`make deploy-run PROJECT=p REGION=europe-west1` for real, against the fake of Google's APIs.

The real gcloud runs every command of the plan (a throwaway CLOUDSDK_CONFIG whose
`api_endpoint_overrides` point at the fake, as `test_real_deploy.py` sets it up). `gcloud run`
puts the region in front of its API's host (`europe-west1-HOST`), which no resolver knows, so
its override names a host only the fake's proxy answers (`HTTP_PROXY` is the fake itself, which
reads the absolute URL of a proxied request as any other). The fake records the Cloud Run
services, the source build and the uploaded archive; the tests check them against the manifest
firebase-functions builds from main.py.

Marked `deploy_harness`: `make test` runs it, `make unit` does not.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.deploy.conftest import copy_project
from tests.deploy.fake_google import PROJECT_NUMBER, FakeGoogle, RunningFake
from tests.deploy.test_real_deploy import ENV_FILE, MANIFEST, PROJECT, SECRET_VERSION, tool_env
from tests.deploy.test_upload import check_only_code

pytestmark = [
    pytest.mark.deploy_harness,
    pytest.mark.skipif(shutil.which("gcloud") is None, reason="the Google Cloud CLI is missing"),
    pytest.mark.timeout(1500),
]

REGION = "europe-west1"
BUILD_ACCOUNT = f"projects/-/serviceAccounts/{PROJECT_NUMBER}-compute@developer.gserviceaccount.com"
RUN_REPOSITORY = f"projects/{PROJECT}/locations/{REGION}/repositories/cloud-run-source-deploy"


class RunDeploy:
    """The make run and what the fake recorded."""

    def __init__(self, fake: FakeGoogle, done: subprocess.CompletedProcess[str]) -> None:
        self.fake, self.done = fake, done

    def service(self, name: str) -> dict:
        """The Knative service `gcloud run deploy` created for function `name`."""
        service = MANIFEST[name]["entryPoint"].lower().replace("_", "-")
        full = f"apis/serving.knative.dev/v1/namespaces/{PROJECT}/services/{service}"
        assert full in self.fake.resources, f"{service} not deployed"
        return self.fake.resources[full]


@pytest.fixture(scope="module")
def run_deploy(tmp_path_factory: pytest.TempPathFactory) -> RunDeploy:
    """`make deploy-run` in a copy of the project, against a fresh fake."""
    work = tmp_path_factory.mktemp("deploy-run")
    project = copy_project(work / "project")
    (project / f".env.{PROJECT}").write_text("".join(f"{k}={v}\n" for k, v in ENV_FILE.items()))
    with RunningFake() as fake:
        fake.add_secret(PROJECT, "LINE_CHANNEL_SECRET", SECRET_VERSION)
        fake.resources[BUILD_ACCOUNT] = {"name": BUILD_ACCOUNT}  # make bootstrap's business
        fake.resources[RUN_REPOSITORY] = {"name": RUN_REPOSITORY, "format": "DOCKER"}
        env = tool_env(fake, work / "home")
        subprocess.run(
            ["gcloud", "config", "set", "api_endpoint_overrides/run",
             f"http://fake-google:{fake.port}/"],
            env=env, check=True, capture_output=True,
        )  # fmt: skip
        env["HTTP_PROXY"] = env["http_proxy"] = fake.url
        done = subprocess.run(
            ["make", "deploy-run", f"PROJECT={PROJECT}", f"REGION={REGION}"],
            cwd=project, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=1200, start_new_session=True,
        )  # fmt: skip
    return RunDeploy(fake, done)


def test_make_deploy_run_succeeds_without_a_person(run_deploy: RunDeploy) -> None:
    """Exit 0 with no TTY; gcloud called nothing the fake lacks."""
    out = run_deploy.done.stdout[-4000:] + run_deploy.done.stderr[-4000:]
    assert run_deploy.done.returncode == 0, out
    assert run_deploy.fake.unknown == [], run_deploy.fake.unknown


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_each_function_is_built_for_its_entry_point(run_deploy: RunDeploy, name: str) -> None:
    """The build names the entry point and the base image; the service runs as the runtime
    account with its signature type and region in its environment."""
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
    kind = "cloudevent" if MANIFEST[name].get("eventTrigger") is not None else "http"
    assert variables["FUNCTION_SIGNATURE_TYPE"] == kind
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
