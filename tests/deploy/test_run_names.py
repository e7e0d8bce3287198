"""A function whose Cloud Run service would get no `run.app` URL is refused where the name is
made: `<service>-<project number>` must fit 63 characters (`dedup.platform.run_names`).

`make deploy-run` refuses it before any command runs (exit 2, the function, the length, the
limit and how to rename it); when the number is read at deploy time, the env files' step, the
first after the reads, refuses it before anything is deployed. `dedup manifest --check
--project-number=N` warns about it in any project.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dedup.platform.run_names import RUN_APP_LABEL_LIMIT, run_app_problem, run_app_url
from tests.deploy.conftest import add_function

NUMBER = "123456789012"
LONGEST = RUN_APP_LABEL_LIMIT - 1 - len(NUMBER)
"""The longest service name whose run.app URL exists in a project with a 12-digit number."""
LONG_NAME = "notify_every_follower_of_the_author_about_the_new_post"
"""A function name whose service (54 characters) does not fit with a 12-digit number."""
LONG_FUNCTION = f'''"""A throwaway function whose name is too long for its run.app URL."""

from firebase_functions import firestore_fn

from dedup import Delivery, trigger_once


@firestore_fn.on_document_created(document="users/{{uid}}")
@trigger_once("long_name")
def {LONG_NAME}(
    event: firestore_fn.Event[firestore_fn.DocumentSnapshot | None], delivery: Delivery
) -> None:
    """Nothing."""
'''


def test_the_limit_is_the_run_app_label_of_63_characters() -> None:
    """A service of exactly `LONGEST` characters fits (its URL's first label is 63 long); one
    character more does not, and the reason names the function, the length and the limit."""
    fits = "a" * LONGEST
    assert run_app_problem(fits, fits, NUMBER) is None
    assert len(run_app_url(fits, "europe-west1", NUMBER).split("//")[1].split(".")[0]) == 63
    problem = run_app_problem("f_" + fits, "f-" + fits, NUMBER)
    assert problem is not None
    assert problem.startswith("f_" + fits + ": ")
    assert "65 characters" in problem
    assert f"over the {RUN_APP_LABEL_LIMIT}" in problem
    assert f"at most {LONGEST} characters" in problem


def test_make_deploy_run_refuses_it_before_any_command(project_copy: Path) -> None:
    """`make deploy-run` with the project's number: exit 2, nothing run (no command printed,
    not even under -n), the message names the function, its length, the limit and the fix."""
    add_function(project_copy, "long_name", LONG_FUNCTION, LONG_NAME)
    for dry in (["-n"], []):
        done = subprocess.run(
            ["make", *dry, "deploy-run", "PROJECT=demo-x", "REGION=europe-west1",
             f"PROJECT_NUMBER={NUMBER}", "FIRESTORE_LOCATION=eur3", "BUCKET_LOCATION=EU",
             "SECRET_VERSIONS=LINE_CHANNEL_SECRET=1"],
            cwd=project_copy, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 2, done.stdout + done.stderr
        assert "gcloud" not in done.stdout
        assert f"error: {LONG_NAME}: its Cloud Run service {LONG_NAME.replace('_', '-')}" in (
            done.stderr
        )
        assert "67 characters, over the 63" in done.stderr
        assert f"at most {LONGEST} characters" in done.stderr


def test_with_the_number_read_at_deploy_time_the_check_runs_first(project_copy: Path) -> None:
    """Without PROJECT_NUMBER, `make -n deploy-run` begins with the read of the number and then
    `check-names` with it, before any other command; `check-names` refuses the function (exit
    2, naming it) and accepts it in a project whose number is short enough."""
    add_function(project_copy, "long_name", LONG_FUNCTION, LONG_NAME)
    planned = subprocess.run(
        ["make", "-n", "deploy-run", "PROJECT=demo-x", "REGION=europe-west1",
         "FIRESTORE_LOCATION=eur3", "BUCKET_LOCATION=EU", "SECRET_VERSIONS=LINE_CHANNEL_SECRET=1"],
        cwd=project_copy, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    lines = [
        line for line in planned.stdout.splitlines() if " -m tools." in line or "gcloud" in line
    ]
    assert " -m tools.deploy read project-number " in lines[0]
    assert " -m tools.deploy_run check-names " in lines[1]
    assert (
        '"--project-number=$(cat .cache/deploy/demo-x/at-deploy/project-number-demo-x)"'
        in (lines[1])
    )

    def check(number: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tools.deploy_run", "check-names", "--project=demo-x",
             "--region=europe-west1", f"--project-number={number}"],
            cwd=project_copy, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    refused = check(NUMBER)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.startswith(f"error: {LONG_NAME}: ")
    fits = check("1")  # 54 + 1 + 1 characters
    assert fits.returncode == 0, fits.stderr


def test_dedup_manifest_check_warns_given_the_project_number(project_copy: Path) -> None:
    """`dedup manifest --check --project-number=N` warns about the function on stderr, and
    still passes (the manifest `dedup manifest` wrote is fine); without the number it says
    nothing of it."""
    add_function(project_copy, "long_name", LONG_FUNCTION, LONG_NAME)
    dedup = [sys.executable, "-m", "dedup", "manifest", "--check"]
    written = subprocess.run(
        [sys.executable, "-m", "dedup", "manifest", str(project_copy)],
        cwd=project_copy, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert written.returncode == 0, written.stderr  # functions.yaml, retries on
    warned = subprocess.run(
        [*dedup, f"--project-number={NUMBER}", str(project_copy)],
        cwd=project_copy, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert warned.returncode == 0, warned.stderr
    assert f"warning: {LONG_NAME}: its Cloud Run service" in warned.stderr
    assert "67 characters" in warned.stderr
    quiet = subprocess.run(
        [*dedup, str(project_copy)], cwd=project_copy, capture_output=True, text=True, timeout=300
    )
    assert quiet.returncode == 0, quiet.stderr
    assert LONG_NAME not in quiet.stderr
