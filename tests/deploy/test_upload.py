"""What each deploy path uploads: the functions' code and nothing else, the same on both paths.

Both archives are built by the tools' own archive code, not by a listing that may walk the tree
another way:

* gcloud: `source_util.CreateSourcesZipFile` (the `.gcloudignore` chooser and
  `archive.MakeZipFromDir`, exactly what `gcloud functions deploy --source=.` zips), run with
  gcloud's own Python and its library path, in a subprocess. `gcloud meta
  list-files-for-upload` walks files only and tests directories differently, so it once listed
  the right files while the real archive held no main.py.
* firebase: `prepareFunctionsUpload` of the pinned firebase-tools with firebase.json's `ignore`.

Both run on the project and on a copy holding what must never leave the machine. The deploy
harness (`test_real_deploy.py`) checks the archives the tools really upload the same way.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.deploy.conftest import ROOT

ALLOWED_TOP = {"main.py", "requirements.txt", "dedup", "functions"}
SECRETS = [
    ".env", ".env.my-project", ".env.local", ".env.example", ".secret.local", "functions.yaml",
    "README.md", "Makefile", "docs/deploy.md", "dedup/__pycache__/core.cpython-312.pyc",
    "functions/__pycache__/x.cpython-312.pyc", ".cache/deploy/p/cloudevent.env.yaml",
    ".mypy_cache/x.json", ".pytest_cache/v/x", "firebase-debug.log", "tests/test_x.py",
    "dedup/.env", "functions/.secret.local",
]  # fmt: skip
FIREBASE_TOOLS = ROOT / "tools" / "firebase" / "node_modules" / "firebase-tools"
PREPARE_UPLOAD = FIREBASE_TOOLS / "lib" / "deploy" / "functions" / "prepareFunctionsUpload.js"
GCLOUD_ZIP = """
import shutil, sys
from googlecloudsdk.command_lib.functions import source_util
shutil.move(source_util.CreateSourcesZipFile(sys.argv[2], sys.argv[1]), sys.argv[3])
"""
"""Run by gcloud's Python: the zip `gcloud functions deploy --source=SOURCE` uploads."""


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
        assert not Path(name).name.startswith("."), name


def zip_files(archive: Path) -> list[str]:
    """The files (not the directory entries) of a zip archive, sorted."""
    with zipfile.ZipFile(archive) as opened:
        return sorted(n for n in opened.namelist() if not n.endswith("/"))


def gcloud_sdk_python() -> tuple[str, str]:
    """gcloud's own Python interpreter and the PYTHONPATH of its libraries."""
    root = subprocess.run(
        ["gcloud", "info", "--format=value(installation.sdk_root)"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.strip()  # fmt: skip
    bundled = Path(root) / "platform" / "bundledpythonunix" / "bin" / "python3"
    python = str(bundled) if bundled.exists() else (shutil.which("python3") or "python3")
    return python, f"{root}/lib:{root}/lib/third_party"


def gcloud_archive(project: Path, out: Path) -> Path:
    """The zip `gcloud functions deploy --source=PROJECT` builds, built by gcloud's own code."""
    python, path = gcloud_sdk_python()
    work = out.parent / "gcloud-zip"
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [python, "-c", GCLOUD_ZIP, str(project), str(work), str(out)],
        env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"}, check=True, timeout=120,
    )  # fmt: skip
    return out


def firebase_archive(project: Path, out: Path) -> Path:
    """The zip `firebase deploy` builds from PROJECT, by firebase-tools' own packaging code."""
    config = json.loads((project / "firebase.json").read_text())["functions"][0]
    script = (
        f"require({json.dumps(str(PREPARE_UPLOAD))}).prepareFunctionsUpload("
        f"{json.dumps(str(project))}, {json.dumps(str(project))}, "
        f"{{ignore: {json.dumps(config['ignore'])}}}, [], undefined)"
        ".then(r => console.log(JSON.stringify(r.pathToSource)))"
    )
    done = subprocess.run(
        ["node", "-e", script], capture_output=True, text=True, check=True, timeout=120
    )
    shutil.move(json.loads(done.stdout.strip().splitlines()[-1]), out)
    return out


def source(where: str, project_copy: Path) -> Path:
    """The project itself, or a copy of it holding secrets and caches."""
    return ROOT if where == "project" else with_secrets(project_copy)


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="the Google Cloud CLI is not installed")
@pytest.mark.parametrize("where", ["project", "copy with secrets"])
def test_gcloud_archive_holds_the_code_and_only_it(
    where: str, project_copy: Path, tmp_path: Path
) -> None:
    """gcloud's own zip of the source holds main.py, requirements.txt, dedup/ and functions/
    (every file of them), and no directory entry of a cache either."""
    archive = gcloud_archive(source(where, project_copy), tmp_path / "gcloud.zip")
    files = zip_files(archive)
    check_only_code(files)
    assert {"dedup/__init__.py", "dedup/cli/__init__.py", "functions/__init__.py"} <= set(files)
    with zipfile.ZipFile(archive) as opened:
        for name in opened.namelist():
            assert "__pycache__" not in name, name
            assert not name.startswith("."), name


@pytest.mark.parametrize("where", ["project", "copy with secrets"])
def test_firebase_archive_holds_the_code_and_only_it(
    where: str, project_copy: Path, tmp_path: Path
) -> None:
    """firebase.json's ignore list leaves out env files, caches, docs, tools and tests."""
    check_only_code(
        zip_files(firebase_archive(source(where, project_copy), tmp_path / "firebase.zip"))
    )


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="the Google Cloud CLI is not installed")
@pytest.mark.parametrize("where", ["project", "copy with secrets"])
def test_both_archives_hold_the_same_files(where: str, project_copy: Path, tmp_path: Path) -> None:
    """The zip gcloud builds holds exactly the files of the zip firebase builds."""
    project = source(where, project_copy)
    gcloud = zip_files(gcloud_archive(project, tmp_path / "gcloud.zip"))
    firebase = zip_files(firebase_archive(project, tmp_path / "firebase.zip"))
    assert gcloud == firebase
    assert len(gcloud) > 50
