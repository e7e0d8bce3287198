"""The `dedup` library installs as a package: `pip wheel .`, then `pip install <wheel>[cli]`;
and `python -m build`, what the release workflow runs, builds the same package.

Slow (about a minute: a fresh venv gets the wheel and its dependencies from the configured
package index), so `make unit` leaves it out (`packaging` marker); `make test` runs it.
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest

from tests.packaging.conftest import ROOT, library_source, run

pytestmark = pytest.mark.packaging


def test_wheel_installs_the_library_and_the_dedup_command(
    tmp_path: Path, built_wheel: Path
) -> None:
    """A wheel built from the sources holds the `dedup` package (and nothing of the functions),
    installs with its runtime dependencies into a fresh venv, and with the `cli` extra puts a
    working `dedup` command on that venv's PATH."""
    wheel = built_wheel
    names = zipfile.ZipFile(wheel).namelist()
    assert "dedup/__init__.py" in names
    assert "dedup/cli/__init__.py" in names
    assert "dedup/http/__init__.py" in names
    assert "dedup/py.typed" in names
    assert "dedup/testing/__init__.py" in names
    assert "dedup/send.py" in names
    assert not [n for n in names if n.startswith(("functions/", "main.py", "tests/", "demo/"))]

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    run(venv / "bin" / "python", "-m", "pip", "install", "-q", f"{wheel}[cli]")
    shown = run(venv / "bin" / "dedup", "--help", cwd=tmp_path)
    assert "Usage: dedup" in shown.stdout
    for command in ("show", "list", "release", "revive", "purge", "stats"):
        assert command in shown.stdout
    # Every module and name of the public API (read from its list, so a new module is covered
    # as soon as it is listed), imported from a folder outside the source tree.
    public = json.loads((ROOT / "tests" / "dedup" / "public_api.json").read_text())
    check = (
        "import importlib, json, sys\n"
        "public = json.loads(sys.argv[1])\n"
        "for module, names in public.items():\n"
        "    loaded = importlib.import_module(module)\n"
        "    for name in names:\n"
        "        getattr(loaded, name)\n"
        "    print(module, loaded.__file__)\n"
    )
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    imported = run(venv / "bin" / "python", "-c", check, json.dumps(public), cwd=outside)
    lines = imported.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(public)
    assert all(str(venv) in line for line in lines)  # the installed copies, not the work tree's
    # The async deploy wrapper docs/async.md imports, from the installed library alone (the
    # template's `functions` package is not in the wheel): it marks an async function.
    wrapper = (
        "from dedup.aio import ASGI_ENDPOINT, asgi_function\n"
        "from firebase_functions import firestore_fn\n"
        "@asgi_function(firestore_fn.on_document_written(document='posts/{postId}'))\n"
        "async def count_async(event): ...\n"
        "print(type(getattr(count_async, ASGI_ENDPOINT)).__name__)\n"
    )
    declared = run(venv / "bin" / "python", "-c", wrapper, cwd=outside)
    assert declared.stdout.split() == ["ManifestEndpoint"]


def test_python_m_build_makes_the_wheel_the_release_publishes(tmp_path: Path) -> None:
    """`python -m build --wheel` (the release workflow's builder, in its isolated build
    environment) makes a wheel of the package's version holding the library with its test
    helpers and sender, and nothing of the template."""
    import tomllib

    source = library_source(tmp_path / "source")
    run(sys.executable, "-m", "build", "--wheel", "--outdir", tmp_path / "dist", source)
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    [wheel] = (tmp_path / "dist").glob("*.whl")
    assert wheel.name == f"exactly_once_functions-{version}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    for needed in (
        "dedup/__init__.py",
        "dedup/testing/__init__.py",
        "dedup/send.py",
        "dedup/py.typed",
    ):
        assert needed in names
    assert not [n for n in names if n.startswith(("functions/", "main.py", "tests/", "demo/"))]
