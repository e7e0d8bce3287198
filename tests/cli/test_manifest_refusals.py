"""`dedup manifest` and `--check` refuse, naming the fix, a source folder that would deploy
functions that cannot start or would deploy nothing: a bad DEDUP_* setting in its env files
(read as the Firebase CLI reads them), a main.py that declares no function, a `trigger_once`
function no firebase-functions decorator wraps, and the decorators swapped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dedup.cli.settings import deploy_env, settings_problems

pytestmark = pytest.mark.subprocesses

DEDUP = Path(sys.executable).parent / "dedup"

MAIN = """
from firebase_functions import firestore_fn
from dedup import trigger_once


@firestore_fn.on_document_created(document="signups/{uid}")
@trigger_once("welcome")
def welcome(event, delivery):
    pass
"""


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A functions source folder outside the repo holding `MAIN` as main.py."""
    folder = tmp_path / "functions"
    folder.mkdir()
    (folder / "main.py").write_text(MAIN)
    return folder


def run_dedup(*args: str, project: str | None = None) -> subprocess.CompletedProcess[str]:
    """The installed `dedup` from outside the source, with no DEDUP_* or project of this
    shell (or `project` as GCLOUD_PROJECT, as the Firebase CLI sets it for predeploy)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("DEDUP_") and k not in ("GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT")
    }
    if project is not None:
        env["GCLOUD_PROJECT"] = project
    return subprocess.run(
        [str(DEDUP), *args], capture_output=True, text=True, timeout=120, check=False, cwd="/",
        env=env,
    )  # fmt: skip


@pytest.mark.parametrize("check", [True, False], ids=["check", "write"])
def test_a_misspelled_setting_in_dot_env_is_refused_naming_the_setting(
    source: Path, check: bool
) -> None:
    """`DEDUP_LEASE_SECOND=30` in SOURCE_DIR/.env: exit 1 naming DEDUP_LEASE_SECONDS and the
    file; nothing written."""
    (source / ".env").write_text("DEDUP_LEASE_SECOND=30\n")
    done = run_dedup("manifest", *(["--check"] if check else []), str(source))
    assert done.returncode == 1, done
    assert "DEDUP_LEASE_SECONDS" in done.stderr, done.stderr
    assert str(source / ".env") in done.stderr, done.stderr
    assert not (source / "functions.yaml").exists()


def test_each_file_firebase_loads_is_read(source: Path) -> None:
    """`.env.<project>` (deploy) and `.env.local` (emulator) are checked too; a bad value
    names its variable; the project's file is loaded into main.py's import."""
    (source / ".env").write_text("DEDUP_LEASE_SECONDS=120\n")
    (source / ".env.local").write_text("DEDUP_MAX_ATTEMPTS=many\n")
    problems = settings_problems(source, "demo-p")
    assert len(problems) == 1, problems
    assert "DEDUP_MAX_ATTEMPTS" in problems[0]
    assert ".env.local" in problems[0]
    (source / ".env.local").unlink()
    (source / ".env.demo-p").write_text("DEDUP_KEY_LAYOT=spread\n")
    problems = settings_problems(source, None)
    assert len(problems) == 1, problems
    assert "DEDUP_KEY_LAYOUT" in problems[0]
    assert ".env.demo-p" in problems[0]
    (source / ".env.demo-p").write_text("DEDUP_LEASE_SECONDS=90\nNOTE='a # b'\n")
    assert settings_problems(source, "demo-p") == []
    assert deploy_env(source, "demo-p") == {"DEDUP_LEASE_SECONDS": "90", "NOTE": "a # b"}
    (source / "main.py").write_text(MAIN + "\nimport os\nassert os.environ['NOTE'] == 'a # b'\n")
    assert run_dedup("manifest", str(source), project="demo-p").returncode == 0
    refused = run_dedup("manifest", str(source), project="demo-other")
    assert refused.returncode == 1
    assert "NOTE" in refused.stderr


def test_an_env_file_firebase_refuses_is_refused(source: Path) -> None:
    """A line that is not KEY=VALUE: refused, as `firebase deploy` would refuse it."""
    (source / ".env").write_text("DEDUP_LEASE_SECONDS 30\n")
    done = run_dedup("manifest", "--check", str(source))
    assert done.returncode == 1
    assert "not a valid dotenv file" in done.stderr, done.stderr


def test_swapped_decorators_are_refused_naming_the_function(source: Path) -> None:
    """`@trigger_once` above `@firestore_fn.on_document_created`: exit 1 naming the function."""
    (source / "main.py").write_text(
        MAIN.replace(
            '@firestore_fn.on_document_created(document="signups/{uid}")\n@trigger_once("welcome")',
            '@trigger_once("welcome")\n@firestore_fn.on_document_created(document="signups/{uid}")',
        )
    )
    for args in (["--check"], []):
        done = run_dedup("manifest", *args, str(source))
        assert done.returncode == 1, done
        assert "welcome" in done.stderr
        assert "@firestore_fn.on_document_created(...)\n    @trigger_once(...)" in done.stderr


@pytest.mark.parametrize(
    ("main", "expected"),
    [
        ("import os\n", "declares no function"),
        (
            "from dedup import trigger_once\n\n@trigger_once('x')\ndef lonely(event, delivery):\n"
            "    pass\n",
            "lonely: declared with trigger_once but no firebase-functions decorator wraps it",
        ),
    ],
    ids=["no function", "trigger_once alone"],
)
def test_a_main_that_would_deploy_nothing_is_refused(
    source: Path, main: str, expected: str
) -> None:
    """No function, or a `trigger_once` function with no platform decorator: both commands
    exit 1 saying so, and nothing is written."""
    (source / "main.py").write_text(main)
    for args in (["--check"], []):
        done = run_dedup("manifest", *args, str(source))
        assert done.returncode == 1, done
        assert expected in done.stderr, done.stderr
    assert not (source / "functions.yaml").exists()


def test_an_empty_functions_yaml_is_refused(source: Path) -> None:
    """A functions.yaml that lists no function (`endpoints: {}`) fails --check."""
    (source / "functions.yaml").write_text("specVersion: v1alpha1\nendpoints: {}\n")
    done = run_dedup("manifest", "--check", str(source))
    assert done.returncode == 1
    assert "lists no function" in done.stderr, done.stderr
