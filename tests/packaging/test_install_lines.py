"""Every install line of docs/library.md ("1. Install or vendor") works as typed.

Each command line of that section's shell blocks runs with bash, as written, in a fresh folder
outside the source tree that holds what the docs say is there: a checkout at
`./exactly-once-functions` (the library's sources, and the template's venv after
`make install`) and a functions folder `./my-functions`, with a fresh venv first on PATH (the
`pip` a user types). One thing is changed, and only in the `git+https` line: the repository URL
`https://github.com/OWNER/REPO` becomes `file://localhost/` of a local clone of this
repository, tagged `v<pyproject version>`. The line that needs the package index (marked
"only once published") is the only one not run. A line this test does not know fails it, so a
new install line in the docs is run too. Slow (fresh venvs, dependencies from the package
index): marker `packaging`.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from pathlib import Path

import pytest

from tests.packaging.conftest import ROOT, library_source, run

pytestmark = pytest.mark.packaging

DOC = ROOT / "docs" / "library.md"
REPOSITORY_URL = "https://github.com/OWNER/REPO"
INDEX_ONLY = "only once published"


def install_lines() -> list[str]:
    """The command lines of the shell blocks of docs/library.md's section 1, in order."""
    text = DOC.read_text()
    section = text[text.index("## 1. Install or vendor") : text.index("## 2. ")]
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.DOTALL):
        lines += [line for line in block.splitlines() if line and not line.startswith("#")]
    return lines


def kind_of(line: str) -> str:
    """How the line is checked: vendor, vendor-check, git, wheel or index (not run)."""
    if INDEX_ONLY in line:
        return "index"
    if " vendor --check " in line:
        return "vendor-check"
    if " vendor " in line:
        return "vendor"
    if f"git+{REPOSITORY_URL}@" in line:
        return "git"
    if line.startswith("pip wheel "):
        return "wheel"
    raise AssertionError(f"docs/library.md has an install line this test does not run: {line}")


def version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return str(tomllib.load(file)["project"]["version"])


def test_the_docs_list_each_way_to_install() -> None:
    """The section gives a vendored, a release-tag and a checkout-wheel line, and the index
    line is marked as working only once published."""
    kinds = [kind_of(line) for line in install_lines()]
    assert {"vendor", "git", "wheel", "index"} <= set(kinds), kinds
    assert f"@v{version()}" in next(line for line in install_lines() if kind_of(line) == "git")


def shell(line: str, work: Path, venv: Path, checkout_bin: Path) -> None:
    """Run `line` with bash in `work`, the fresh venv's bin first on PATH (then the checkout
    venv's, for the `dedup` of the vendor check)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}:{checkout_bin}:{env['PATH']}"
    env["VIRTUAL_ENV"] = str(venv)
    run("bash", "-e", "-c", line, cwd=work, env=env)


def imported_from(venv: Path, work: Path) -> Path:
    """Where the venv's Python imports `dedup` from, asked from a folder with no sources."""
    elsewhere = work / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    found = run(venv / "bin" / "python", "-c", "import dedup; print(dedup.__file__)", cwd=elsewhere)
    return Path(found.stdout.strip())


@pytest.mark.parametrize(
    "line", [line for line in install_lines() if kind_of(line) in ("vendor", "git", "wheel")]
)
def test_install_line_works_as_typed(line: str, tmp_path: Path) -> None:
    """The line exits 0 and leaves `dedup` importable where the docs say: in the fresh venv
    (git, wheel), or copied into my-functions with its requirements (vendor, then the
    section's `--check` line passes)."""
    work = tmp_path / "work"
    checkout = library_source(work / "exactly-once-functions")
    (checkout / "venv").symlink_to(ROOT / "venv", target_is_directory=True)
    functions = work / "my-functions"
    functions.mkdir()
    (functions / "main.py").write_text("")
    (functions / "requirements.txt").write_text("firebase-functions\n")
    venv = work / "venv"
    run(sys.executable, "-m", "venv", venv)
    kind = kind_of(line)
    if kind == "git":
        clone = tmp_path / "clone"
        run("git", "clone", "-q", "--no-hardlinks", ROOT, clone)
        run("git", "-C", clone, "tag", "-f", f"v{version()}")
        # `file://localhost/...`: the pip that Python 3.12.1's venv bundles (23.2) refuses a
        # `git+file:///...` requirement (no host); git and every pip take this form.
        line = line.replace(REPOSITORY_URL, f"file://localhost{clone}")
    shell(line, work, venv, checkout / "venv" / "bin")
    if kind == "vendor":
        assert (functions / "dedup" / "__init__.py").is_file()
        assert "google-cloud-firestore" in (functions / "requirements.txt").read_text()
        for check in (entry for entry in install_lines() if kind_of(entry) == "vendor-check"):
            shell(check, work, venv, checkout / "venv" / "bin")
        return
    assert imported_from(venv, work).is_relative_to(venv), imported_from(venv, work)
    if kind == "git" or "[cli]" in line:
        assert "Usage: dedup" in run(venv / "bin" / "dedup", "--help", cwd=work).stdout
    if kind == "wheel":
        assert list((work / "dist").glob(f"exactly_once_functions-{version()}-*.whl"))
