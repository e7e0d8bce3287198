"""Tasks follow the functions' region, under the environment each deploy path gives a function.

The relay (`functions.outbox_tasks.create_task`, fed an outbox document as `enqueue_task`
writes it: a bare `indexPost`) runs in a fresh interpreter whose environment is exactly what a
deployed `relay_outbox` gets on each path, with REGION=europe-west1:

* firebase: the project's env files, `FIREBASE_CONFIG` and `GCLOUD_PROJECT` (firebase-tools'
  `loadFirebaseEnvs`), what firebase-tools' own `functionFromEndpoint` puts in the function's
  `serviceConfig.environmentVariables` (run here with node on the manifest's endpoint), and
  `FUNCTION_TARGET`, `LOG_EXECUTION_ID` (its `createFunction`);
* gcloud: the `--env-vars-file` file `make deploy-gcloud` deploys the function with;
* run: what `make deploy-run` gives the function's service (`tools.deploy_run.
  service_environment`: its env file and `FUNCTION_TARGET`), with the project number known;
* all: what the platform adds, `FUNCTION_TARGET` and `FUNCTION_SIGNATURE_TYPE` (the Python
  buildpack's launch defaults) and Cloud Run's `K_SERVICE`, `K_REVISION`, `K_CONFIGURATION`,
  `PORT`. Nothing else: Cloud Run functions set no region variable.

The Admin SDK talks to a local fake of Cloud Tasks: its API base URL (the only thing changed in
firebase-admin) points at a recording HTTP server, and the service-account credential's token
endpoint too. The fake records the queue each task is created in and the URL it targets.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from dedup.cli import dotenv
from dedup.errors import ConfigError
from functions.region import function_region, task_function_resource, task_function_url
from tests.deploy.conftest import ROOT
from tests.deploy.test_deploy import manifest_of
from tools.deploy.target import Target
from tools.deploy_run import service_environment

PROJECT = "demo-parse-only"
PROJECT_NUMBER = "123456"
REGION = "europe-west1"
FUNCTION = "relay_outbox"
FIREBASE_TOOLS = ROOT / "tools/firebase/node_modules/firebase-tools/lib"
PLATFORM = {"K_SERVICE": "relay-outbox", "K_REVISION": "relay-outbox-00001-abc",
            "K_CONFIGURATION": "relay-outbox", "PORT": "8080"}  # fmt: skip
"""What Cloud Run sets in every container (its reserved variables)."""


class FakeCloudTasks(ThreadingHTTPServer):
    """Records every request; answers a token request and a task creation as Google does."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[str, dict[str, Any]]] = []

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeCloudTasks

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/token":
            body = {"access_token": "fake", "expires_in": 3600, "token_type": "Bearer"}
        else:
            sent = json.loads(raw)
            self.server.requests.append((self.path, sent))
            body = {"name": sent["task"]["name"]}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def fake() -> Iterator[FakeCloudTasks]:
    server = FakeCloudTasks()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def service_account_key(path: Path, token_uri: str) -> Path:
    """A service-account key file whose token endpoint is the fake's."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": PROJECT,
                "private_key_id": "fake",
                "private_key": pem,
                "client_email": f"exactly-once-fn@{PROJECT}.iam.gserviceaccount.com",
                "client_id": "1",
                "token_uri": token_uri,
            }
        )
    )
    return path


def firebase_tools_variables(endpoint: dict[str, Any]) -> dict[str, str]:
    """The variables firebase-tools' own `functionFromEndpoint` gives the function."""
    script = (
        f"const v2 = require({json.dumps(str(FIREBASE_TOOLS / 'gcp/cloudfunctionsv2.js'))});"
        "const ep = JSON.parse(process.argv[1]);"
        "console.log(JSON.stringify(v2.functionFromEndpoint(ep).serviceConfig"
        ".environmentVariables));"
    )
    shaped = {**endpoint, "id": FUNCTION, "project": PROJECT, "region": endpoint["region"][0]}
    shaped["eventTrigger"] = {**shaped["eventTrigger"]}
    printed = subprocess.run(
        ["node", "-e", script, json.dumps(shaped)], capture_output=True, text=True, check=True
    ).stdout
    return dict(json.loads(printed))


def firebase_environment() -> dict[str, str]:
    """What `make deploy-firebase` and the platform give a deployed relay_outbox."""
    endpoint = manifest_of(ROOT)["endpoints"][FUNCTION]
    users = dict(dotenv.load(dotenv.project_env_files(ROOT, PROJECT)))
    config = {"projectId": PROJECT, "storageBucket": f"{PROJECT}.appspot.com"}
    return {
        **users,
        "FIREBASE_CONFIG": json.dumps(config),
        "GCLOUD_PROJECT": PROJECT,
        **firebase_tools_variables(endpoint),
        "FUNCTION_TARGET": FUNCTION,
        "LOG_EXECUTION_ID": "true",
        **PLATFORM,
    }


def gcloud_environment(tmp_path: Path) -> dict[str, str]:
    """What `make deploy-gcloud` and the platform give a deployed relay_outbox: the env file
    its deploy command names, and the buildpack's launch defaults."""
    subprocess.run(
        [sys.executable, "-m", "tools.deploy", "env-files", f"--project={PROJECT}",
         f"--region={REGION}"],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip
    planned = subprocess.run(
        [sys.executable, "-m", "tools.deploy", "plan", "deploy-gcloud", f"--project={PROJECT}",
         f"--region={REGION}", "--firestore-location=nam5", "--bucket-location=EU",
         "--secret-versions=LINE_CHANNEL_SECRET=3"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    command = next(line.split() for line in planned.splitlines() if f" {FUNCTION} " in line)
    env_file = next(w for w in command if w.startswith("--env-vars-file=")).split("=", 1)[1]
    variables = yaml.safe_load((ROOT / env_file).read_text())
    return {
        **{k: str(v) for k, v in variables.items()},
        "FUNCTION_TARGET": FUNCTION,
        "FUNCTION_SIGNATURE_TYPE": "cloudevent",  # GCF builds it as a CloudEvent function
        **PLATFORM,
    }


def run_environment() -> dict[str, str]:
    """What `make deploy-run` and Cloud Run give relay_outbox's service."""
    target = Target(project=PROJECT, region=REGION, project_number=PROJECT_NUMBER)
    return {**service_environment(FUNCTION, target), **PLATFORM}


RELAY = """
import json, sys
import firebase_admin.functions as admin_functions
admin_functions._CLOUD_TASKS_API_URL_FORMAT = (
    sys.argv[1] + "/v2/" + admin_functions._CLOUD_TASKS_API_RESOURCE_PATH
)
from functions.outbox_tasks import create_task, outbox_task

for function in ("indexPost", "locations/us-east4/functions/indexPost"):
    name, data = outbox_task({"function": function, "taskData": json.dumps({"postId": "p1"})})
    assert create_task(name, data, "task-" + str(len(function))) is True
"""


def relay_under(environment: dict[str, str], fake: FakeCloudTasks, tmp_path: Path) -> None:
    """Create the outbox's tasks in a fresh interpreter with exactly `environment` (plus the
    fake's credential and the interpreter's PATH)."""
    key = service_account_key(tmp_path / "key.json", f"{fake.base}/token")
    env = {
        **environment,
        "GOOGLE_APPLICATION_CREDENTIALS": str(key),
        "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
        "HOME": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", RELAY, fake.base], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def function_url(path: str, region: str) -> str:
    """indexPost's URL in `region` on deploy path `path`."""
    if path == "run":
        return f"https://indexpost-{PROJECT_NUMBER}.{region}.run.app"
    return f"https://{region}-{PROJECT}.cloudfunctions.net/indexPost"


@pytest.mark.parametrize("path", ["firebase", "gcloud", "run"])
def test_a_relayed_task_goes_to_the_functions_region(
    path: str, fake: FakeCloudTasks, tmp_path: Path
) -> None:
    """A bare `indexPost` (as docs/tasks.md enqueues it) goes to the queue of REGION and targets
    the function in REGION (on the Cloud Run path its service's `run.app` URL); a name with its
    own location keeps it."""
    environment = {
        "firebase": firebase_environment,
        "gcloud": lambda: gcloud_environment(tmp_path),
        "run": run_environment,
    }[path]()
    assert environment["FUNCTION_REGION"] == REGION, sorted(environment)
    relay_under(environment, fake, tmp_path)
    assert [(p, body["task"]["httpRequest"]["url"]) for p, body in fake.requests] == [
        (
            f"/v2/projects/{PROJECT}/locations/{REGION}/queues/indexPost/tasks",
            function_url(path, REGION),
        ),
        (
            f"/v2/projects/{PROJECT}/locations/us-east4/queues/indexPost/tasks",
            function_url(path, "us-east4"),
        ),
    ]
    first = fake.requests[0][1]["task"]
    assert first["name"].startswith(f"projects/{PROJECT}/locations/{REGION}/queues/indexPost/")


def test_without_a_region_a_deployed_instance_refuses_instead_of_guessing(
    fake: FakeCloudTasks, tmp_path: Path
) -> None:
    """A function deployed by hand without FUNCTION_REGION sends no task to us-central1: the
    relay raises ConfigError naming the variable (the event is retried after a redeploy)."""
    environment = gcloud_environment(tmp_path)
    del environment["FUNCTION_REGION"]
    key = service_account_key(tmp_path / "key.json", f"{fake.base}/token")
    env = {**environment, "GOOGLE_APPLICATION_CREDENTIALS": str(key), "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", RELAY, fake.base], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert "FUNCTION_REGION is not set" in done.stderr
    assert fake.requests == []


def test_the_region_is_read_from_function_region_only() -> None:
    """FUNCTION_REGION wins; locally and in the emulators (which set none) us-central1; a
    deployed instance without it is refused rather than sent to us-central1."""
    assert function_region({"FUNCTION_REGION": REGION, "K_SERVICE": "x"}) == REGION
    assert function_region({}) == "us-central1"
    assert function_region({"K_SERVICE": "x", "FUNCTIONS_EMULATOR": "true"}) == "us-central1"
    with pytest.raises(ConfigError, match="FUNCTION_REGION is not set"):
        function_region({"K_SERVICE": "x"})
    env = {"FUNCTION_REGION": REGION}
    assert task_function_resource("indexPost", env) == f"locations/{REGION}/functions/indexPost"
    for named in ("locations/us-east4/functions/indexPost",
                  "projects/p/locations/us-east4/functions/indexPost"):  # fmt: skip
        assert task_function_resource(named, env) == named


def test_a_task_targets_its_service_only_on_the_cloud_run_path() -> None:
    """Without RUN_SERVICE_URL_TEMPLATE (the firebase and gcloud paths, the emulators) a task
    keeps the Admin SDK's URL; with it, the service of the function's entry point, in the
    function's region or in the location its name holds."""
    env = {"FUNCTION_REGION": REGION}
    assert task_function_url("indexPost", env) is None
    env["RUN_SERVICE_URL_TEMPLATE"] = "https://{service}-42.{region}.run.app"
    assert task_function_url("indexPost", env) == f"https://indexpost-42.{REGION}.run.app"
    assert task_function_url("send_invoice", env) == f"https://send-invoice-42.{REGION}.run.app"
    named = "projects/p/locations/us-east4/functions/indexPost"
    assert task_function_url(named, env) == "https://indexpost-42.us-east4.run.app"
