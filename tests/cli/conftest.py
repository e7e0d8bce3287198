"""Fixtures of the command-line tests: the CLI run in-process against the Firestore emulator."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from google.cloud import firestore

from dedup.cli import cli

Invoke = Callable[..., Result]


@pytest.fixture
def invoke(firestore_client: firestore.Client) -> Invoke:
    """Run `dedup --project <emulator project> ARGS...`; keyword arguments go to CliRunner.invoke
    (`env={"COLUMNS": "80"}` for a narrow terminal).

    The terminal is 200 columns wide unless a test says otherwise.
    """
    runner = CliRunner(env={"COLUMNS": "200"})

    def run(*args: str, **kwargs: object) -> Result:
        return runner.invoke(cli, ["--project", firestore_client.project, *args], **kwargs)  # type: ignore[arg-type]

    return run


def fake_gcloud(tmp_path: Path, edition: str = "ENTERPRISE", describe_exit: int = 0) -> Path:
    """A gcloud on PATH that records its argv (one JSON line each) and answers `databases
    describe` with `edition`; returns the log's path."""
    log = tmp_path / "calls.jsonl"
    script = tmp_path / "bin" / "gcloud"
    script.parent.mkdir()
    script.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "if sys.argv[1:4] == ['firestore', 'databases', 'describe']:\n"
        f"    print({edition!r})\n"
        f"    sys.exit({describe_exit})\n"
    )
    script.chmod(0o755)
    return log
