"""An async function exported from main.py: deployed by gcloud with the ASGI server, refused,
naming it, by firebase and the Functions emulator; never dropped without a word.

The platform's side is played as Google's Python buildpack plays it: its web process is the bare
`functions-framework` command, which reads its options (`--target`, `--signature-type`,
`--asgi`) from the environment (`FUNCTION_TARGET`, `FUNCTION_SIGNATURE_TYPE`,
`FUNCTION_USE_ASGI`): here with the env file `make deploy-gcloud` deploys the function with.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from firebase_functions import firestore_fn

import dedup.aio
from dedup.cli.discovery import FIREBASE_ENDPOINT
from demo.serve import free_port
from tests.deploy.conftest import add_function
from tests.deploy.test_deploy import (
    FIRESTORE_PREFIX,
    LOCATION,
    MAKE_VARS,
    REGION,
    WHERE,
    function_deploys,
)
from tools.exports import DeclarationError, classify

COUNT_ASYNC = '''"""A throwaway async function, declared as docs/async.md says."""

import functions_framework.aio
from cloudevents.http.event import CloudEvent
from firebase_functions import firestore_fn

from dedup.aio import asgi_function


@asgi_function(firestore_fn.on_document_written(document="posts/{postId}"))
@functions_framework.aio.cloud_event
async def count_async(event: CloudEvent) -> None:
    """Answer every event."""
'''

NO_TRIGGER = '''"""A throwaway async function that declares no trigger."""


async def bare_async(event: object) -> None:
    """Nothing deploys this."""
'''


def tool(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m tools.deploy ARGS` in `project`."""
    return subprocess.run(
        [sys.executable, "-m", "tools.deploy", *args, *WHERE, f"--firestore-location={LOCATION}",
         "--bucket-location=EU",
         "--secret-versions=LINE_CHANNEL_SECRET=3"],
        cwd=project, capture_output=True, text=True,
    )  # fmt: skip


def serve_as_the_platform(project: Path, env_file: Path, target: str) -> tuple[str, int]:
    """Start `functions-framework` as the buildpack's web process does, with `env_file`'s
    variables; POST one CloudEvent; the response's Server header and status."""
    variables = {k: str(v) for k, v in yaml.safe_load(env_file.read_text()).items()}
    port = free_port()
    path = str(Path(sys.executable).parent) + ":/usr/bin:/bin"
    env = {**variables, "FUNCTION_TARGET": target, "PORT": str(port), "K_SERVICE": target,
           "PATH": path, "HOME": str(project)}  # fmt: skip
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "functions-framework")], cwd=project, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/",
        data=json.dumps({"value": {}}).encode(),
        headers={"Content-Type": "application/json", "ce-id": "e1", "ce-specversion": "1.0",
                 "ce-source": "//firestore.googleapis.com/projects/p/databases/(default)",
                 "ce-type": FIRESTORE_PREFIX + "written", "ce-subject": "documents/posts/p1"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return response.headers.get("Server", ""), response.status
            except (ConnectionError, urllib.error.URLError):
                assert server.poll() is None, server.communicate()[0].decode()[-2000:]
                assert time.monotonic() < deadline, "functions-framework did not answer"
                time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_an_async_function_is_deployed_by_gcloud_and_served_by_the_asgi_server(
    project_copy: Path,
) -> None:
    """Its trigger, retry and region as a sync function's; its env file asks for ASGI; the
    command the platform runs serves it with uvicorn and answers its CloudEvent."""
    add_function(project_copy, "count_async", COUNT_ASYNC, "count_async")
    assert tool(project_copy, "env-files").returncode == 0
    done = tool(project_copy, "plan", "deploy-gcloud")
    assert done.returncode == 0, done.stderr
    command = next(shlex.split(c) for c in done.stdout.splitlines() if " count_async " in c)
    assert {"--retry", f"--region={REGION}", f"--trigger-location={LOCATION}",
            f"--trigger-event-filters=type={FIRESTORE_PREFIX}written",
            "--trigger-event-filters-path-pattern=document=posts/{postId}",
            "--entry-point=count_async", "--timeout=50s"} <= set(command)  # fmt: skip
    env_file = project_copy / next(
        w for w in command if w.startswith("--env-vars-file=")
    ).removeprefix("--env-vars-file=")
    variables = yaml.safe_load(env_file.read_text())
    assert variables["FUNCTION_USE_ASGI"] == "true"
    assert variables["FUNCTION_SIGNATURE_TYPE"] == "cloudevent"
    assert variables["FUNCTION_REGION"] == REGION
    server, status = serve_as_the_platform(project_copy, env_file, "count_async")
    assert (server, status) == ("uvicorn", 200)
    sync_file = env_file.with_name("sync_published_count.env.yaml")
    assert "FUNCTION_USE_ASGI" not in yaml.safe_load(sync_file.read_text())
    others = [
        c for c in done.stdout.splitlines() if "functions deploy" in c and "count_async" not in c
    ]
    assert others
    assert all("asgi-" not in c for c in others)  # sync functions stay on Flask
    assert "count_async" in function_deploys(project_copy)  # `make -n deploy-gcloud` too


def test_firebase_and_the_emulator_refuse_an_async_function_naming_it(project_copy: Path) -> None:
    """One line each, naming the function and saying what to use instead; nothing starts."""
    add_function(project_copy, "count_async", COUNT_ASYNC, "count_async")
    done = tool(project_copy, "manifest", "functions.yaml")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: count_async is an async function: `make deploy-firebase` serves sync functions "
        "only; deploy it with `make deploy-gcloud` (docs/async.md)"
    ]
    assert not (project_copy / "functions.yaml").exists()
    make = subprocess.run(
        ["make", "deploy-firebase", *MAKE_VARS, "-o", "install", "-o", "topics",
         "EMULATORS=echo firebase-was-run"],
        cwd=project_copy, capture_output=True, text=True,
    )  # fmt: skip
    assert make.returncode != 0
    assert "error: count_async is an async function" in make.stderr
    assert "firebase-was-run" not in make.stdout
    assert not (project_copy / "functions.yaml").exists()
    emulator = subprocess.run(
        [sys.executable, "tools/emulators.py", "exec", "--", "true"],
        cwd=project_copy, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert emulator.returncode == 2
    lines = emulator.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: count_async is an async function: the Functions emulator")
    assert "make deploy-gcloud" in lines[0]


def test_an_exported_async_function_without_a_trigger_is_refused_by_every_plan(
    project_copy: Path,
) -> None:
    """The manifest tool drops nothing: an export it cannot deploy stops both paths, named."""
    add_function(project_copy, "bare_async", NO_TRIGGER, "bare_async")
    for command in (["manifest"], ["plan", "deploy-gcloud"], ["plan", "topics"]):
        done = tool(project_copy, *command)
        assert done.returncode == 2, command
        assert done.stdout == ""
        assert done.stderr.startswith(
            "error: main.py exports bare_async, an async function that declares no trigger"
        ), done.stderr
        assert "asgi_function" in done.stderr


def test_an_async_function_cannot_declare_a_task_queue_trigger(project_copy: Path) -> None:
    """A trigger the ASGI server cannot be given fails at import, naming the function."""
    source = COUNT_ASYNC.replace(
        'firestore_fn.on_document_written(document="posts/{postId}")',
        "tasks_fn.on_task_dispatched()",
    ).replace("import firestore_fn", "import firestore_fn, tasks_fn")
    add_function(project_copy, "count_async", source, "count_async")
    done = tool(project_copy, "plan", "deploy-gcloud")
    assert done.returncode == 2
    assert done.stderr.startswith(
        "error: main.py: count_async: an async function cannot have a taskQueueTrigger"
    ), done.stderr
    assert done.stdout == ""


def test_every_refusal_names_the_wrapper_where_the_library_has_it() -> None:
    """An async function under an SDK decorator, one with no trigger, and a plain function with
    none are each refused naming `dedup.aio` (the library's home of `asgi_function`), never the
    template's `functions.asgi`; what that name imports is the wrapper the deploy accepts."""

    async def on_sdk(event: object) -> None: ...

    async def bare(event: object) -> None: ...

    def plain() -> None: ...

    setattr(on_sdk, FIREBASE_ENDPOINT, {"eventTrigger": {}})
    for name, value in (("on_sdk", on_sdk), ("bare", bare), ("plain", plain)):
        with pytest.raises(DeclarationError) as refused:
            classify(name, value)
        message = str(refused.value)
        assert "dedup.aio" in message, message
        assert "functions.asgi" not in message, message
    trigger = firestore_fn.on_document_written(document="posts/{postId}")
    accepted = classify("bare", dedup.aio.asgi_function(trigger)(bare))
    assert accepted.asgi
