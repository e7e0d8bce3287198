"""Fixtures of the command-line tests: the CLI run in-process against the Firestore emulator."""

from __future__ import annotations

from collections.abc import Callable

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
