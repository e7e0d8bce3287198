"""Which Python the venv is built with, and the deploy runtime that follows it.

`tools/find-python.sh` is run with a PATH of stand-in interpreters (each prints its version, as
the finder asks) and no pyenv; a real interpreter in the system paths the finder also looks in
(/usr/bin...) is taken into account where it could win. `tools/runtime.py` is run on folders
holding only a venv's pyvenv.cfg and a firebase.json; the plans are the ones `make -n` prints.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.deploy.conftest import ROOT
from tools.runtime import RuntimeMismatch, runtime_of_venv, supported_versions, sync_firebase_json

SYSTEM_DIRS = ("/usr/bin", "/usr/local/bin", "/opt/homebrew/bin")
RUNTIME = f"python3{sys.version_info.minor}"
"""The venv's runtime: these tests run in the venv."""


def system_python(version: str) -> str | None:
    """A real pythonX.Y in the system paths the finder looks in, if this machine has one."""
    for folder in SYSTEM_DIRS:
        candidate = Path(folder) / f"python{version}"
        if candidate.exists():
            return str(candidate)
    return None


def stand_ins(tmp_path: Path, *versions: str) -> Path:
    """A bin folder with the tools the finder uses and a `pythonX.Y` per version that prints
    its version."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("sh", "grep", "sort", "sed", "rm"):
        found = shutil.which(tool)
        assert found, tool
        if not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    for version in versions:
        fake = bin_dir / f"python{version}"
        fake.write_text(f"#!/bin/sh\necho {version}\n")
        fake.chmod(0o755)
    return bin_dir


def find(tmp_path: Path, *versions: str, **env: str) -> subprocess.CompletedProcess[str]:
    """tools/find-python.sh with only the stand-ins of `versions` on PATH, and `env`."""
    path = str(stand_ins(tmp_path, *versions))
    return subprocess.run(
        ["sh", str(ROOT / "tools" / "find-python.sh"), *env.pop("args", "").split()],
        env={"PATH": path, "HOME": str(tmp_path), **env},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_order_is_313_then_314_then_312() -> None:
    """The supported versions, in the order make install looks for them."""
    assert supported_versions() == ("3.13", "3.14", "3.12")


def test_pyproject_says_what_was_tested_and_what_is_accepted() -> None:
    """The classifiers name exactly the versions the finder calls tested; requires-python
    accepts exactly the supported ones (3.12 up to 3.14)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    prefix = "Programming Language :: Python :: 3."
    classified = {c.removeprefix(prefix) for c in project["classifiers"] if c.startswith(prefix)}
    finder = (ROOT / "tools" / "find-python.sh").read_text()
    tested = re.search(r'^tested="([^"]+)"$', finder, re.MULTILINE)
    assert tested is not None
    assert {f"3.{c}" for c in classified} == set(tested.group(1).split())
    minors = sorted(int(v.split(".")[1]) for v in supported_versions())
    assert project["requires-python"] == f">=3.{minors[0]},<3.{minors[-1] + 1}"


def test_313_is_chosen_before_314_and_312(tmp_path: Path) -> None:
    """With 3.12, 3.13 and 3.14 on PATH, the venv is built with 3.13."""
    found = find(tmp_path, "3.12", "3.14", "3.13")
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == str(tmp_path / "bin" / "python3.13")


def test_314_is_chosen_before_312_with_a_warning(tmp_path: Path) -> None:
    """Without 3.13, 3.14 comes before 3.12, and the finder warns that 3.14 is untested."""
    found = find(tmp_path, "3.12", "3.14")
    assert found.returncode == 0, found.stderr
    expected = system_python("3.13") or str(tmp_path / "bin" / "python3.14")
    assert found.stdout.strip() == expected
    if expected.endswith("3.14"):
        assert "warning: Python 3.14" in found.stderr
        assert "untested" in found.stderr


def test_312_alone_is_chosen(tmp_path: Path) -> None:
    """With only 3.12 present, the venv is built with 3.12, without a warning."""
    found = find(tmp_path, "3.12")
    assert found.returncode == 0, found.stderr
    expected = system_python("3.13") or system_python("3.14") or str(tmp_path / "bin/python3.12")
    assert found.stdout.strip() == expected
    if expected.endswith("3.12"):
        assert found.stderr == ""


def test_python_wins(tmp_path: Path) -> None:
    """PYTHON= is taken over a 3.13 on PATH."""
    chosen = stand_ins(tmp_path, "3.12") / "python3.12"
    found = find(tmp_path, "3.13", PYTHON=str(chosen))
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == str(chosen)


def test_an_unsupported_python_is_refused_by_name(tmp_path: Path) -> None:
    """PYTHON= of another version is refused, naming it and the supported versions."""
    chosen = stand_ins(tmp_path, "3.11") / "python3.11"
    found = find(tmp_path, "3.13", PYTHON=str(chosen))
    assert found.returncode == 1
    assert found.stderr.startswith(f"error: PYTHON={chosen} is Python 3.11, not a supported")
    assert "3.13 3.14 3.12" in found.stderr


def test_a_venv_of_another_version_is_removed_saying_so(tmp_path: Path) -> None:
    """`--venv DIR` (make install) removes a venv built with another version than the chosen
    interpreter's, and says so; a venv of the same version is kept, silently."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    old = stand_ins(tmp_path, "3.12", "3.13") / "python3.12"
    (venv / "bin" / "python").symlink_to(old)
    kept = find(tmp_path, PYTHON=str(old), args=f"--venv {venv}")
    assert kept.returncode == 0, kept.stderr
    assert kept.stderr == ""
    assert venv.exists()
    chosen = tmp_path / "bin" / "python3.13"
    changed = find(tmp_path, PYTHON=str(chosen), args=f"--venv {venv}")
    assert changed.returncode == 0, changed.stderr
    assert changed.stdout.strip() == str(chosen)
    assert changed.stderr.strip() == (
        f"Recreating {venv}: it was built with Python 3.12, and the chosen interpreter is "
        f"Python 3.13 ({chosen})."
    )
    assert not venv.exists()


def fake_source(tmp_path: Path, version: str, *runtimes: str) -> Path:
    """A folder with a venv's pyvenv.cfg of `version` and a firebase.json whose codebases
    have `runtimes` (no firebase.json without any)."""
    (tmp_path / "venv").mkdir(parents=True)
    (tmp_path / "venv" / "pyvenv.cfg").write_text(
        f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {version}\n"
    )
    if runtimes:
        codebases = ",\n".join(
            f'    {{\n      "source": "s{i}",\n      "runtime": "{runtime}"\n    }}'
            for i, runtime in enumerate(runtimes)
        )
        (tmp_path / "firebase.json").write_text(f'{{\n  "functions": [\n{codebases}\n  ]\n}}\n')
    return tmp_path


@pytest.mark.parametrize(("version", "runtime"), [("3.13.0", "python313"), ("3.12.1", "python312"),
                                                  ("3.14.2", "python314")])  # fmt: skip
def test_the_runtime_is_the_venvs(tmp_path: Path, version: str, runtime: str) -> None:
    """The runtime is the venv's version's, whether or not firebase.json exists."""
    assert runtime_of_venv(fake_source(tmp_path / "a", version, runtime)) == runtime
    assert runtime_of_venv(fake_source(tmp_path / "b", version)) == runtime


def test_a_mismatch_is_refused_naming_both(tmp_path: Path) -> None:
    """A 3.13 venv under a firebase.json that says python312 is refused, naming both and the
    two ways out."""
    source = fake_source(tmp_path, "3.13.0", "python312")
    with pytest.raises(RuntimeMismatch) as refused:
        runtime_of_venv(source)
    message = str(refused.value)
    assert "firebase.json says runtime 'python312'" in message
    assert "the venv is Python 3.13 (python313)" in message
    assert "make install" in message
    assert "PYTHON=/path/to/python3.12 make install" in message


def test_a_venv_of_an_unsupported_version_is_refused(tmp_path: Path) -> None:
    """A venv of Python 3.11 gives no runtime: refused, naming its version."""
    with pytest.raises(RuntimeMismatch, match=r"the venv is Python 3\.11"):
        runtime_of_venv(fake_source(tmp_path, "3.11.7"))


def test_install_writes_the_venvs_runtime_into_firebase_json(tmp_path: Path) -> None:
    """`sync_firebase_json` (make install) changes every codebase's runtime, and nothing else
    of the file; run again, it changes nothing."""
    source = fake_source(tmp_path, "3.13.0", "python312", "python312")
    before = (source / "firebase.json").read_text()
    assert sync_firebase_json(source) == (
        "firebase.json: runtime python312 -> python313 (the venv's Python 3.13)"
    )
    assert (source / "firebase.json").read_text() == before.replace("python312", "python313")
    assert sync_firebase_json(source) is None
    assert runtime_of_venv(source) == "python313"


def make_dry_run(project: Path, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-n", *command], cwd=project, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k != "PYTHON"},
    )  # fmt: skip


@pytest.mark.subprocesses
def test_the_dry_runs_show_the_venvs_runtime() -> None:
    """`make -n deploy-gcloud` gives every deploy `--runtime=` of the venv; `make -n
    deploy-firebase` shows the runtime it checks before `firebase deploy`."""
    gcloud = make_dry_run(ROOT, "deploy-gcloud", "PROJECT=x", "REGION=y")
    assert gcloud.returncode == 0, gcloud.stderr
    deploys = [line for line in gcloud.stdout.splitlines() if "gcloud functions deploy" in line]
    assert deploys
    assert all(f" --runtime={RUNTIME} " in line for line in deploys), deploys
    firebase = make_dry_run(ROOT, "deploy-firebase", "PROJECT=x", "-o", "install", "-o", "topics")
    assert firebase.returncode == 0, firebase.stderr
    assert f"-m tools.runtime check {RUNTIME};" in firebase.stdout


@pytest.mark.subprocesses
def test_a_mismatch_stops_both_deploys_before_anything_deploys(project_copy: Path) -> None:
    """With firebase.json saying another runtime than the venv's, the gcloud plan is refused
    and the Firebase deploy stops at its runtime check, each naming both runtimes."""
    other = next(f"python{v.replace('.', '')}" for v in supported_versions() if
                 f"python{v.replace('.', '')}" != RUNTIME)  # fmt: skip
    config = project_copy / "firebase.json"
    config.write_text(
        config.read_text().replace(f'"runtime": "{RUNTIME}"', f'"runtime": "{other}"')
    )
    gcloud = make_dry_run(project_copy, "deploy-gcloud", "PROJECT=x", "REGION=y")
    assert gcloud.returncode != 0
    assert f"firebase.json says runtime '{other}'" in gcloud.stderr
    assert f"({RUNTIME})" in gcloud.stderr
    assert "gcloud functions deploy" not in gcloud.stdout
    firebase = subprocess.run(
        ["make", "deploy-firebase", "PROJECT=x", "-o", "install", "-o", "topics"],
        cwd=project_copy, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert firebase.returncode != 0
    assert f"firebase.json says runtime '{other}'" in firebase.stderr
    assert "firebase deploy" not in firebase.stderr.split("tools.runtime check")[-1]
    assert not (project_copy / "functions.yaml").exists()
