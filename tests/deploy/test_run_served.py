"""`sync_published_count` served as a Cloud Run function is served: functions-framework with
exactly the environment `make deploy-run` gives its service, fed Eventarc's Firestore events.

The buildpack of `gcloud run deploy --function=ENTRY` starts functions-framework with
`FUNCTION_TARGET=ENTRY` and no signature type of its own; everything else comes from the
service's `--env-vars-file` (`tools.deploy_run.service_environment` gives both) and from Cloud
Run itself (`PORT`, `K_SERVICE`, `K_REVISION`, `K_CONFIGURATION`). Here the server runs with
those variables and the emulator's host only: nothing of this process's environment leaks in
(not even `PATH`). The plan sets no `FUNCTION_SIGNATURE_TYPE` (Cloud Run reserves it): the
function is a CloudEvent function by its registration with functions-framework
(`functions.signature`); without it, it would be served as an HTTP function and refuse the
CloudEvents. Eventarc delivers a Firestore event in binary
content mode with the protobuf `DocumentEventData` as its body (`dedup.testing.firestore_event`
builds it with Google's own `google-events` types).
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from google.cloud import firestore

from dedup import testing
from demo.serve import free_port
from tests.conftest import PROJECT
from tests.deploy.conftest import ROOT
from tools.deploy.manifest import endpoints, sdk_manifest
from tools.deploy.target import Target
from tools.deploy_run import service_environment, service_names

FUNCTION = "sync_published_count"
REGION = "europe-west1"
EVENTS = 6
"""Distinct events (posts created published), spread over `AUTHORS`."""
AUTHORS = 3
COPIES = 5
"""Copies of each event posted at once, all events at the same time."""
SUCCESS = range(200, 300)


def platform_environment(
    port: int, function: str = FUNCTION, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """What the served process gets: the plan's service environment of `function`, Cloud Run's
    own variables and the emulator's host, plus `extra` (what a test adds, such as the
    variables a function's own configuration needs)."""
    service = service_names({"endpoints": dict(endpoints(sdk_manifest(ROOT)))})[function]
    plan = service_environment(function, Target(project=PROJECT, region=REGION))
    cloud_run = {
        "PORT": str(port),
        "K_SERVICE": service,
        "K_REVISION": f"{service}-00001-abc",
        "K_CONFIGURATION": service,
    }
    emulator = {"FIRESTORE_EMULATOR_HOST": testing.firestore_emulator(PROJECT).host}
    return {**plan, **cloud_run, **emulator, **(extra or {})}


@contextmanager
def serving(
    log: Path, function: str = FUNCTION, extra: Mapping[str, str] | None = None
) -> Iterator[str]:
    """`functions-framework --target <the --function entry point> --port PORT` in the project,
    under `platform_environment` only, its output in `log`; its URL while it runs."""
    port = free_port()
    env = platform_environment(port, function, extra)
    with log.open("wb") as output:
        server = subprocess.Popen(
            [str(ROOT / "venv" / "bin" / "functions-framework"),
             "--target", env["FUNCTION_TARGET"], "--port", str(port), "--host", "127.0.0.1"],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=output,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}/"
            deadline = time.monotonic() + 60
            while True:
                assert server.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, "not listening within 60 s"
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    time.sleep(0.1)
            yield url
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """`FUNCTION` served as its Cloud Run service is (`serving`); its URL."""
    with serving(tmp_path / "server.log") as url:
        yield url


def test_one_increment_per_event_under_concurrent_copies(
    served: str, firestore_client: firestore.Client
) -> None:
    """Served with the environment its plan gives it, `sync_published_count` counts one
    increment per event: `EVENTS` Firestore CloudEvents (protobuf, binary mode), `COPIES`
    copies of each posted at once, then each redelivered as Pub/Sub does until one copy is
    answered 2xx. Every author's `publishedPostCount` is its number of events, and redelivering
    every event once more changes nothing."""
    events = [
        testing.firestore_event(
            f"posts/served-{n}", None, {"authorId": f"author-{n % AUTHORS}", "published": True},
            project=PROJECT, change="written", location="nam5",
        )
        for n in range(EVENTS)
    ]  # fmt: skip
    with ThreadPoolExecutor(EVENTS) as pool:
        answers = list(
            pool.map(lambda e: testing.deliver_until_done(served, e, copies=COPIES), events)
        )
    for event, statuses in zip(events, answers, strict=True):
        assert any(s in SUCCESS for s in statuses), (event.description, statuses)
        assert all(s in SUCCESS or s in (409, 429, 500, 503) for s in statuses), statuses

    def counts() -> dict[str, int]:
        users = firestore_client.collection("users")
        return {
            f"author-{a}": (users.document(f"author-{a}").get().to_dict() or {}).get(
                "publishedPostCount", 0
            )
            for a in range(AUTHORS)
        }

    expected = {f"author-{a}": len(range(a, EVENTS, AUTHORS)) for a in range(AUTHORS)}
    assert counts() == expected
    for event in events:
        assert testing.deliver(served, event) in SUCCESS
    assert counts() == expected
