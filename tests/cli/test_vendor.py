"""`dedup vendor SOURCE_DIR`: the library copied into a functions source folder, its
requirements added to that folder's requirements.txt, for both deploy CLIs' uploads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from dedup.cli import cli
from dedup.cli.vendor import MARK, library_folder, runtime_requirements


def vendor(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["vendor", *args])
    return result.exit_code, result.output


def test_vendor_copies_the_library_and_completes_the_requirements(tmp_path: Path) -> None:
    """The copy holds every module of the library (no bytecode) and a mark; requirements.txt
    keeps its lines and gains each runtime requirement it lacked, once."""
    (tmp_path / "requirements.txt").write_text("firebase-functions==0.6.0\nrequests\n")
    code, output = vendor(str(tmp_path))
    assert code == 0, output
    copied = {p.relative_to(tmp_path / "dedup") for p in (tmp_path / "dedup").rglob("*.py")}
    installed = {
        p.relative_to(library_folder())
        for p in library_folder().rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert copied == installed
    assert not list((tmp_path / "dedup").rglob("*.pyc"))
    assert (tmp_path / "dedup" / MARK).exists()
    lines = (tmp_path / "requirements.txt").read_text().splitlines()
    assert lines[:2] == ["firebase-functions==0.6.0", "requests"]
    kept = ("firebase-functions", "requests")  # already named: not added again
    added = [line for line in runtime_requirements() if not line.startswith(kept)]
    assert added
    assert all(line in lines for line in added)
    assert [sum(line.startswith(name) for line in lines) for name in kept] == [1, 1]
    assert vendor("--check", str(tmp_path))[0] == 0
    before = (tmp_path / "requirements.txt").read_text()
    assert vendor(str(tmp_path))[0] == 0  # again: the copy replaced, nothing added
    assert (tmp_path / "requirements.txt").read_text() == before


def test_the_vendored_copy_is_what_main_py_imports(tmp_path: Path) -> None:
    """Run from the source folder, as both runtimes run main.py, `import dedup` finds the copy."""
    assert vendor(str(tmp_path))[0] == 0
    found = subprocess.run(
        [sys.executable, "-c", "import dedup, dedup.http; print(dedup.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert Path(found.stdout.strip()).is_relative_to(tmp_path)


def test_check_fails_on_a_missing_or_stale_copy(tmp_path: Path) -> None:
    """`--check` writes nothing and exits 1 naming what a deploy would miss."""
    code, output = vendor("--check", str(tmp_path))
    assert code == 1
    assert "not a vendored copy" in output
    assert "requirements.txt lacks google-cloud-firestore" in output
    assert not (tmp_path / "dedup").exists()
    assert vendor(str(tmp_path))[0] == 0
    (tmp_path / "dedup" / "kernel" / "transitions.py").write_text("# edited\n")
    code, output = vendor("--check", str(tmp_path))
    assert code == 1
    assert "is not the installed dedup" in output


def test_a_folder_it_did_not_write_is_never_replaced(tmp_path: Path) -> None:
    """An existing dedup/ without the mark (someone's own code) stops the command untouched."""
    (tmp_path / "dedup").mkdir()
    (tmp_path / "dedup" / "mine.py").write_text("x = 1\n")
    code, output = vendor(str(tmp_path))
    assert code != 0
    assert "was not written by `dedup vendor`" in output
    assert (tmp_path / "dedup" / "mine.py").read_text() == "x = 1\n"


def test_check_refuses_lines_cloud_build_could_not_install_with_the_library(
    tmp_path: Path,
) -> None:
    """A pin of firebase-functions below the library's bound, the library's own distribution
    (not on the index) and a wheel outside the folder each fail --check, naming the line; a
    requirement the library accepts passes."""
    assert vendor(str(tmp_path))[0] == 0
    requirements = tmp_path / "requirements.txt"
    complete = requirements.read_text()
    for line, named in [
        ("firebase-functions==0.4.0", "firebase-functions"),
        ("firebase_functions<0.5", "firebase-functions"),
        ("exactly-once-functions==0.1.0", "exactly-once-functions"),
        ("../dist/exactly_once_functions-0.1.0-py3-none-any.whl", "outside"),
    ]:
        requirements.write_text(f"{line}\n{complete}")
        code, output = vendor("--check", str(tmp_path))
        assert code == 1, (line, output)
        assert line in output, output
        assert named in output, output
    for line in ("firebase_functions~=0.5.0", "firebase-functions>=0.6.0", "./wheels/a.whl"):
        requirements.write_text(f"{line}\n{complete}")
        code, output = vendor("--check", str(tmp_path))
        assert code == 0, (line, output)
