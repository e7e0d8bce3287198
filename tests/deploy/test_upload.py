"""What each deploy path uploads: the functions' code and nothing else.

`.gcloudignore` is an allow-list, checked with gcloud's own listing
(`gcloud meta list-files-for-upload`); firebase.json's `ignore` is a deny-list, checked with
firebase-tools' own listing code (`fsAsync.readdirRecursive` with the patterns its packager
adds). Both run on the project and on a copy holding what must never leave the machine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.conftest import ROOT

ALLOWED_TOP = {"main.py", "requirements.txt", "dedup", "functions"}
SECRETS = [
    ".env", ".env.my-project", ".env.local", ".env.example", "functions.yaml", "README.md",
    "Makefile", "docs/deploy.md", "dedup/__pycache__/core.cpython-312.pyc",
    "functions/__pycache__/x.cpython-312.pyc", ".cache/deploy/p/cloudevent.env.yaml",
    "firebase-debug.log", "tests/test_x.py",
]  # fmt: skip
FS_ASYNC = ROOT / "tools" / "firebase" / "node_modules" / "firebase-tools" / "lib" / "fsAsync.js"


def with_secrets(project: Path) -> Path:
    """`project` with files that must not be uploaded."""
    for name in SECRETS:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text("TOKEN=secret\n")
    return project


def check_only_code(files: list[str]) -> None:
    """Every listed file is the functions' code, and the code is there."""
    assert {"main.py", "requirements.txt", "dedup/config.py", "functions/runtime.py"} <= set(files)
    for name in files:
        assert name.split("/")[0] in ALLOWED_TOP, name
        assert "__pycache__" not in name, name
        assert not name.endswith(".pyc"), name


def gcloud_upload(project: Path) -> list[str]:
    """What `gcloud functions deploy --source=PROJECT` would upload."""
    done = subprocess.run(
        ["gcloud", "meta", "list-files-for-upload", str(project)],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def firebase_upload(project: Path) -> list[str]:
    """What `firebase deploy` would archive from PROJECT, by firebase-tools' own listing."""
    ignore = json.loads((project / "firebase.json").read_text())["functions"][0]["ignore"]
    ignore = [*ignore, "firebase-debug.log", "firebase-debug.*.log", ".runtimeconfig.json"]
    script = (
        f"require({json.dumps(str(FS_ASYNC))}).readdirRecursive("
        f"{{path: {json.dumps(str(project))}, ignoreStrings: {json.dumps(ignore)}}})"
        ".then(files => console.log(JSON.stringify(files.map(f => f.name))))"
    )
    done = subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True)
    return [str(Path(name).relative_to(project)) for name in json.loads(done.stdout)]


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="the Google Cloud CLI is not installed")
@pytest.mark.parametrize("where", ["project", "copy with secrets"])
def test_gcloud_uploads_only_the_allow_list(where: str, project_copy: Path) -> None:
    """`.gcloudignore` lets through main.py, requirements.txt, dedup/ and functions/ only."""
    check_only_code(gcloud_upload(ROOT if where == "project" else with_secrets(project_copy)))


@pytest.mark.parametrize("where", ["project", "copy with secrets"])
def test_firebase_uploads_only_the_functions_code(where: str, project_copy: Path) -> None:
    """firebase.json's ignore list leaves out env files, caches, docs, tools and tests."""
    check_only_code(firebase_upload(ROOT if where == "project" else with_secrets(project_copy)))
