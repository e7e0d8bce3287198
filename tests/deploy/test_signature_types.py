"""Each function of main.py is served as its trigger says, whatever `--signature-type` or
`FUNCTION_SIGNATURE_TYPE` say: an event function as a CloudEvent function, any other (HTTP,
callable, task queue, schedule) as an HTTP function (`functions.signature`).

Cloud Run functions reserve `FUNCTION_SIGNATURE_TYPE` (`gcloud run deploy --function` sets it
itself), so `make deploy-run` sets none, and a function must not depend on it.

How the kind is seen from outside: functions-framework routes only POST to a CloudEvent
function, so its server refuses a GET with the routing's own 405 (Werkzeug's
`MethodNotAllowed`) before any of the function's code runs; an HTTP function's server hands
every method to the function, which answers it itself. Each function is served in a fresh
process (functions-framework's registrations live in the process), with the variables
`.env.local` gives the functions and nothing inherited.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import pytest
from werkzeug.exceptions import MethodNotAllowed

from dedup import testing
from dedup.cli import dotenv
from tests.conftest import PROJECT
from tests.deploy.conftest import ROOT
from tests.deploy.test_run_served import serving
from tools.deploy.gcloud import signature_type
from tools.deploy.manifest import endpoints, sdk_manifest
from tools.deploy.target import Target
from tools.deploy_run import service_environment

KINDS = ("cloudevent", "http")
SERVE_EACH = """
import json, os, sys
import functions_framework
answers = {}
for target, (flag, variable) in json.loads(sys.argv[1]).items():
    os.environ.pop("FUNCTION_SIGNATURE_TYPE", None)  # functions-framework sets it when it serves
    if variable:
        os.environ["FUNCTION_SIGNATURE_TYPE"] = variable
    client = functions_framework.create_app(target, "main.py", flag).test_client()
    answer = client.get("/")
    answers[target] = [answer.status_code, answer.get_data(as_text=True)]
print(json.dumps(answers))
"""
"""Serve each target of argv[1] (target -> [--signature-type or null, FUNCTION_SIGNATURE_TYPE
or null]) as `functions-framework --target` does (`create_app`), GET / once; print the answers."""


def expected_kinds() -> dict[str, str]:
    """Each exported function -> the signature its trigger needs (from the deploy manifest)."""
    return {name: signature_type(endpoint) for name, endpoint in endpoints(sdk_manifest(ROOT))}


def served_kinds(settings: Mapping[str, tuple[str | None, str | None]]) -> dict[str, str]:
    """Each target served with its (flag, variable) in a fresh process -> `cloudevent` when a
    GET was refused by the CloudEvent routing, else `http` (see the module docstring)."""
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/")}
    env.update(dotenv.load([ROOT / ".env.local", ROOT / ".secret.local"]))
    done = subprocess.run(
        [sys.executable, "-c", SERVE_EACH, json.dumps(settings)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.splitlines()[-1])
    routing = json.dumps({"error": MethodNotAllowed.description})
    return {
        target: "cloudevent" if status == 405 and body.strip() == routing else "http"
        for target, (status, body) in answers.items()
    }


def other(kind: str) -> str:
    return next(k for k in KINDS if k != kind)


def test_main_exports_the_twelve_functions_of_both_kinds() -> None:
    """The manifest the checks below read has every function of main.py, of both kinds."""
    kinds = expected_kinds()
    assert len(kinds) == 12, sorted(kinds)
    assert set(kinds.values()) == set(KINDS)


def test_each_function_is_served_as_its_trigger_says_with_no_flag_and_no_variable() -> None:
    """With neither `--signature-type` nor `FUNCTION_SIGNATURE_TYPE`, functions-framework
    serves every event function as a CloudEvent function and every other one as HTTP."""
    kinds = expected_kinds()
    assert served_kinds({name: (None, None) for name in kinds}) == kinds


@pytest.mark.parametrize("source", ["variable", "flag"])
def test_the_wrong_kind_named_by_the_variable_or_the_flag_changes_nothing(source: str) -> None:
    """`FUNCTION_SIGNATURE_TYPE` (what Cloud Run sets itself), or `--signature-type`, naming
    the other kind for every function: each is still served as its trigger says."""
    kinds = expected_kinds()
    settings = {
        name: (other(kind), None) if source == "flag" else (None, other(kind))
        for name, kind in kinds.items()
    }
    assert served_kinds(settings) == kinds


def test_the_cloud_run_services_environment_names_no_signature_type() -> None:
    """No function's service gets `FUNCTION_SIGNATURE_TYPE` from `make deploy-run`'s plan."""
    target = Target(project=PROJECT, region="europe-west1", project_number="123456789012")
    for name in expected_kinds():
        assert "FUNCTION_SIGNATURE_TYPE" not in service_environment(name, target), name


def test_sync_published_count_answers_a_binary_cloudevent_under_the_bare_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`functions-framework --target sync_published_count`, with its Cloud Run service's
    environment (neither the flag nor the variable), reads a binary-mode CloudEvent as a
    CloudEvent function: an event for a document outside `posts/{postId}` is refused with a
    400 naming the function and its pattern, before any store work (no database is reachable
    here: the port below is closed). Served as HTTP it would answer 500."""
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", "127.0.0.1:9")
    event = testing.firestore_event(
        "drafts/d1", None, {"authorId": "a", "published": True},
        project=PROJECT, change="written", location="nam5",
    )  # fmt: skip
    with serving(tmp_path / "server.log") as url:
        request = urllib.request.Request(url, data=event.body, headers=dict(event.headers))
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 400
    assert json.loads(refused.value.read()) == {
        "error": "sync_published_count: the document is not one of this function's (posts/{postId})"
    }
