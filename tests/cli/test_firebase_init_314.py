"""A project as `firebase init functions` writes it today (the pinned Firebase CLI's Python
template: `"runtime": "python314"` in firebase.json, a `functions/` folder with main.py and
requirements.txt) passes `dedup vendor --check` and `dedup manifest --check` once vendored and
its manifest written: neither command depends on the runtime firebase.json names."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from dedup.cli import cli
from tests.cli.test_project import MAIN

FIREBASE_JSON = {
    "functions": [
        {
            "source": "functions",
            "codebase": "default",
            "ignore": ["venv", ".git", "firebase-debug.log", "firebase-debug.*.log", "*.local"],
            "runtime": "python314",
        }
    ]
}
"""firebase.json as the Firebase CLI's `init functions` writes it for Python."""


def dedup(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_vendor_and_manifest_checks_pass_on_a_python314_project(tmp_path: Path) -> None:
    """Vendored and its manifest written, the python314 project passes both checks; before,
    each check fails (so it looks at the project)."""
    (tmp_path / "firebase.json").write_text(json.dumps(FIREBASE_JSON, indent=2))
    functions = tmp_path / "functions"
    functions.mkdir()
    (functions / "main.py").write_text(MAIN)
    (functions / "requirements.txt").write_text("firebase_functions~=0.6.0\n")
    assert dedup("vendor", "--check", str(functions))[0] != 0
    assert dedup("manifest", "--check", str(functions))[0] != 0
    assert dedup("vendor", str(functions))[0] == 0
    assert dedup("manifest", str(functions))[0] == 0
    code, output = dedup("vendor", "--check", str(functions))
    assert code == 0, output
    code, output = dedup("manifest", "--check", str(functions))
    assert code == 0, output
    assert json.loads((tmp_path / "firebase.json").read_text())["functions"][0]["runtime"] == (
        "python314"
    )
