"""A team's own project, not this template: install the built wheel, write a Firestore trigger
and an HTTP endpoint as the docs do, run `dedup manifest`, serve the functions with
functions-framework against the Firestore emulator and send concurrent duplicates.

The project lives in a temporary folder outside the repository (`firebase init functions`'s
shape: `firebase.json`, `functions/main.py`, `functions/requirements.txt`); it imports nothing of
the template and calls no set-up function. Slow (a fresh venv, about a minute), so `make unit`
leaves it out (`packaging`); it needs the Firestore emulator `make test` starts.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from google.cloud import firestore

from dedup import testing
from demo.serve import free_port
from tests.conftest import PROJECT
from tests.packaging.conftest import ROOT, python_313, run

pytestmark = [pytest.mark.packaging, pytest.mark.needs_emulators]

MAIN = '''\
"""Orders: a Firestore trigger and an HTTP endpoint, each effect once."""

import flask
from firebase_functions import firestore_fn, https_fn
from google.cloud import firestore

from dedup import Delivery, trigger_once
from dedup.http import IdempotentRequest, idempotent_http


def count(client: firestore.Client, key: str) -> None:
    client.document(f"effects/{key}").set({"n": firestore.Increment(1)}, merge=True)


@firestore_fn.on_document_created(document="orders/{orderId}")
@trigger_once("order_created")
def order_created(event, delivery: Delivery) -> None:
    count(delivery.client, delivery.key)


@https_fn.on_request()
@idempotent_http("charge", anonymous=True)
def charge(call: IdempotentRequest) -> flask.Response:
    count(call.delivery.client, call.delivery.key)
    return flask.Response("{}", 201, content_type="application/json")
'''

COPIES = 6


def pinned(name: str) -> str:
    """The template's pin of `name` (requirements.txt), which the suite runs against."""
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.split("==")[0].strip() == name:
            return line.strip()
    raise AssertionError(f"{name} is not pinned in requirements.txt")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, built_wheel: Path) -> tuple[Path, Path]:
    """(the functions folder, its venv's bin): a fresh project with the wheel installed the
    documented way (`pip install` of the package, beside the project's own requirements)."""
    work = tmp_path_factory.mktemp("journey")
    wheel = built_wheel
    app = work / "my-app"
    functions = app / "functions"
    functions.mkdir(parents=True)
    (app / "firebase.json").write_text(
        json.dumps({"functions": [{"source": "functions", "runtime": "python313"}]})
    )
    (functions / "main.py").write_text(MAIN)
    (functions / "requirements.txt").write_text(
        f"{pinned('firebase-functions')}\n{pinned('functions-framework')}\n"
    )
    venv = functions / "venv"
    run(python_313(), "-m", "venv", venv, cwd=work)
    bin_ = venv / "bin"
    run(
        bin_ / "python",
        "-m",
        "pip",
        "install",
        "-q",
        "-r",
        functions / "requirements.txt",
        cwd=work,
    )
    run(bin_ / "python", "-m", "pip", "install", "-q", f"{wheel}[cli]", cwd=work)
    return functions, bin_


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of the project's own processes: no DEDUP_* of this shell, no template
    on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEDUP_") and k != "PYTHONPATH"}
    return {**env, "GOOGLE_CLOUD_PROJECT": PROJECT, **extra}


@pytest.fixture
def serve(project: tuple[Path, Path], tmp_path: Path) -> Iterator[Callable[[str, str], str]]:
    """`serve(target, signature)`: the project's function served by its venv's
    functions-framework; its URL. Each server's output is kept in `tmp_path/<target>.log`."""
    functions, bin_ = project
    servers: list[subprocess.Popen[bytes]] = []

    def start(target: str, signature: str) -> str:
        port = free_port()
        log = (tmp_path / f"{target}.log").open("wb")
        command = [
            str(bin_ / "functions-framework"),
            f"--target={target}",
            f"--signature-type={signature}",
            f"--port={port}",
            "--host=127.0.0.1",
        ]
        env = clean_env(FIRESTORE_EMULATOR_HOST=os.environ["FIRESTORE_EMULATOR_HOST"])
        servers.append(subprocess.Popen(command, cwd=functions, env=env, stdout=log, stderr=log))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return f"http://127.0.0.1:{port}/"
            except OSError:
                time.sleep(0.2)
        raise AssertionError((tmp_path / f"{target}.log").read_text())

    yield start
    for server in servers:
        server.terminate()
        server.wait(timeout=30)


def test_the_manifest_turns_retries_on(project: tuple[Path, Path]) -> None:
    """`dedup manifest SOURCE_DIR` from the installed wheel writes the SDK's manifest with
    `retry: true` on the Firestore trigger; `--check` then passes, and fails without it."""
    functions, bin_ = project
    (functions / "functions.yaml").unlink(missing_ok=True)
    done = subprocess.run(
        [bin_ / "dedup", "manifest", "--check", functions],
        env=clean_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "order_created" in done.stdout + done.stderr
    run(bin_ / "dedup", "manifest", functions, cwd=functions.parent, env=clean_env())
    manifest = yaml.safe_load((functions / "functions.yaml").read_text())
    assert manifest["endpoints"]["order_created"]["eventTrigger"]["retry"] is True
    run(bin_ / "dedup", "manifest", "--check", functions, cwd=functions.parent, env=clean_env())


def test_a_misspelled_setting_stops_the_import(project: tuple[Path, Path]) -> None:
    """`DEDUP_LEASE_SECOND=30` stops `import main`, naming DEDUP_LEASE_SECONDS."""
    functions, bin_ = project
    done = subprocess.run(
        [bin_ / "python", "-c", "import main"],
        cwd=functions,
        env=clean_env(DEDUP_LEASE_SECOND="30"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "DEDUP_LEASE_SECONDS" in done.stderr
    run(bin_ / "python", "-c", "import main", cwd=functions, env=clean_env())


def effects(client: firestore.Client) -> dict[str, int]:
    return {d.id: int((d.to_dict() or {})["n"]) for d in client.collection("effects").stream()}


def test_concurrent_duplicates_give_one_effect_each(
    serve: Callable[[str, str], str], firestore_client: firestore.Client, tmp_path: Path
) -> None:
    """Served as the gcloud path serves them, the trigger and the endpoint each have one effect
    per event under concurrent duplicates, and the trigger's log holds the JSON outcome line
    with no set-up call in the project's code."""
    trigger = serve("order_created", "cloudevent")
    events = [
        testing.firestore_event(f"orders/{n}", None, {"item": n}, project=PROJECT, change="created")
        for n in ("o1", "o2")
    ]
    for event in events:
        statuses = testing.deliver_until_done(trigger, event, copies=COPIES)
        assert any(200 <= s < 300 for s in statuses), statuses
    assert sorted(effects(firestore_client).values()) == [1, 1]
    assert sorted(effects(firestore_client)) == sorted(f"{e.id}-order_created" for e in events)

    endpoint = serve("charge", "http")
    key = uuid.uuid4().hex

    def post(_: int = 0) -> int:
        request = urllib.request.Request(
            endpoint,
            data=b'{"amount": 5}',
            method="POST",
            headers={"Content-Type": "application/json", "Idempotency-Key": key},
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=60) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as refused:
            return int(refused.code)

    with ThreadPoolExecutor(COPIES) as pool:
        statuses = list(pool.map(post, range(COPIES)))
    # A copy that finds the first still running is told 409 + Retry-After (docs/http.md);
    # the client retries it, and gets the first one's 201 replayed.
    assert set(statuses) <= {201, 409}, statuses
    retried = [post() for status in statuses if status == 409]
    assert all(status == 201 for status in retried), retried
    assert len(effects(firestore_client)) == 3
    assert all(n == 1 for n in effects(firestore_client).values())

    lines = [
        json.loads(line)
        for line in (tmp_path / "order_created.log").read_text().splitlines()
        if line.startswith("{")
    ]
    assert any(line.get("outcome") == "ran" for line in lines), lines


# --- the first hour: a `firebase init functions` project, each trap refused where it is made ---

FIRST_HOUR_MAIN = '''\
"""Signups, orders and audits, as a new user writes them from the docs."""

from firebase_functions import firestore_fn, pubsub_fn
from google.cloud import firestore

from dedup import Delivery, Mode, trigger_once


def count(client, key):
    client.document(f"effects/{key}").set({"n": firestore.Increment(1)}, merge=True)


@firestore_fn.on_document_created(document="signups/{uid}")
@trigger_once("welcome")
def welcome(event, delivery: Delivery) -> None:
    count(delivery.client, delivery.key)


@firestore_fn.on_document_created(document="orders/{orderId}")
@trigger_once("order_counter", mode=Mode.TRANSACTION)
def order_counter(event, delivery: Delivery) -> None:
    transaction = delivery.transaction
    stats = delivery.client.document("stats/orders")
    total = (stats.get(transaction=transaction).to_dict() or {}).get("total", 0)
    transaction.set(stats, {"total": total + 1}, merge=True)


@pubsub_fn.on_message_published(topic="audit")
@trigger_once("audit")
def audit(event, delivery: Delivery) -> None:
    count(delivery.client, delivery.key)
'''


@pytest.fixture(scope="module")
def first_hour(firebase_init_project: tuple[Path, Path]) -> tuple[Path, Path]:
    """(functions folder, venv bin) of a `firebase init functions` project on Python 3.13 with
    `firebase_functions~=0.5.0` and the wheel (`firebase_init_project`), its main.py written."""
    functions, bin_ = firebase_init_project
    (functions / "main.py").write_text(FIRST_HOUR_MAIN)
    return functions, bin_


def attempt(*command: str | Path, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run a command of the project; its result, whatever its status."""
    return subprocess.run(
        [str(part) for part in command], cwd=cwd, env=clean_env(**env), capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip


def test_firebase_init_requirements_install_with_the_wheel(first_hour: tuple[Path, Path]) -> None:
    """Python 3.13 and firebase-functions 0.5.x installed with the wheel, and `dedup vendor
    --check` has nothing to say about that requirements line."""
    functions, bin_ = first_hour
    version = run(bin_ / "python", "-c", "import sys; print(sys.version_info[:2])").stdout
    assert version.strip() == "(3, 13)"
    shown = run(bin_ / "python", "-m", "pip", "show", "firebase_functions").stdout
    assert "Version: 0.5." in shown, shown
    checked = attempt(bin_ / "dedup", "vendor", "--check", functions, cwd=functions)
    assert "firebase" not in checked.stdout + checked.stderr, checked


def test_firebase_init_project_deploys_with_retries(first_hour: tuple[Path, Path]) -> None:
    """`dedup manifest` on firebase-functions 0.5.x: every function, retries on (the
    Pub/Sub trigger too), and `--check` passes."""
    functions, bin_ = first_hour
    run(bin_ / "dedup", "manifest", functions, cwd=functions, env=clean_env())
    manifest = yaml.safe_load((functions / "functions.yaml").read_text())
    for name in ("welcome", "order_counter", "audit"):
        assert manifest["endpoints"][name]["eventTrigger"]["retry"] is True, manifest
    run(bin_ / "dedup", "manifest", "--check", functions, cwd=functions, env=clean_env())
    (functions / "functions.yaml").unlink()


SWAPPED = FIRST_HOUR_MAIN.replace(
    '@firestore_fn.on_document_created(document="signups/{uid}")\n@trigger_once("welcome")',
    '@trigger_once("welcome")\n@firestore_fn.on_document_created(document="signups/{uid}")',
)
NO_DELIVERY = FIRST_HOUR_MAIN.replace(
    "def welcome(event, delivery: Delivery) -> None:", "def welcome(event) -> None:"
)


@pytest.mark.parametrize(
    ("main", "named"),
    [(SWAPPED, "welcome"), (NO_DELIVERY, "welcome(event, delivery)")],
    ids=["swapped decorators", "handler without delivery"],
)
def test_a_mistake_in_main_stops_the_import_and_the_predeploy(
    first_hour: tuple[Path, Path], tmp_path: Path, main: str, named: str
) -> None:
    """The decorators swapped, or a handler without its `delivery`: `import main` fails and
    `dedup manifest --check` exits non-zero, both naming the function."""
    _, bin_ = first_hour
    source = tmp_path / "functions"
    source.mkdir()
    (source / "main.py").write_text(main)
    imported = attempt(bin_ / "python", "-c", "import main", cwd=source)
    assert imported.returncode != 0
    assert named in imported.stderr, imported.stderr
    checked = attempt(bin_ / "dedup", "manifest", "--check", source, cwd=source)
    assert checked.returncode != 0
    assert named in checked.stderr, checked.stderr


def test_a_misspelled_setting_in_dot_env_stops_the_predeploy(
    first_hour: tuple[Path, Path], tmp_path: Path
) -> None:
    """`DEDUP_LEASE_SECOND=30` in SOURCE_DIR/.env: `dedup manifest --check` exits non-zero
    naming DEDUP_LEASE_SECONDS."""
    _, bin_ = first_hour
    source = tmp_path / "functions"
    source.mkdir()
    (source / "main.py").write_text(FIRST_HOUR_MAIN)
    (source / ".env").write_text("DEDUP_LEASE_SECOND=30\n")
    checked = attempt(bin_ / "dedup", "manifest", "--check", source, cwd=source)
    assert checked.returncode != 0
    assert "DEDUP_LEASE_SECONDS" in checked.stderr, checked.stderr


def test_two_apps_of_one_main_in_one_process(first_hour: tuple[Path, Path]) -> None:
    """Two `functions_framework.create_app` calls on main.py in one process, for two of its
    functions (main.py imported twice): both succeed."""
    functions, bin_ = first_hour
    script = (
        "import functions_framework\n"
        "a = functions_framework.create_app('welcome', 'main.py', 'cloudevent')\n"
        "b = functions_framework.create_app('audit', 'main.py', 'cloudevent')\n"
        "print(a is not b)\n"
    )
    done = run(bin_ / "python", "-c", script, cwd=functions, env=clean_env())
    assert done.stdout.strip() == "True"


def test_five_copies_through_functions_framework_give_one_effect(
    first_hour: tuple[Path, Path], firestore_client: firestore.Client, tmp_path: Path
) -> None:
    """The documented functions-framework command, on firebase-functions 0.5.x and Python 3.13:
    five copies of a signup event, one effect."""
    functions, bin_ = first_hour
    port = free_port()
    command = [
        str(bin_ / "functions-framework"), "--target", "welcome", "--signature-type",
        "cloudevent", "--port", str(port), "--host", "127.0.0.1",
    ]  # fmt: skip
    log = (tmp_path / "welcome.log").open("wb")
    env = clean_env(FIRESTORE_EMULATOR_HOST=os.environ["FIRESTORE_EMULATOR_HOST"])
    server = subprocess.Popen(command, cwd=functions, env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "welcome.log").read_text()
                time.sleep(0.2)
        event = testing.firestore_event(
            f"signups/{uuid.uuid4().hex}", None, {"email": "a@example.com"}, project=PROJECT,
            change="created",
        )  # fmt: skip
        statuses = testing.deliver_until_done(f"http://127.0.0.1:{port}/", event, copies=5)
        assert any(200 <= s < 300 for s in statuses), statuses
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert effects(firestore_client) == {f"{event.id}-welcome": 1}
