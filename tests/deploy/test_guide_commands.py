"""docs/deploy.md's step by step, as typed: every `make` command of its shell blocks plans
without an account, and each of the three deploy paths ends with rules, indexes and TTL."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.deploy.conftest import ROOT
from tests.deploy.test_dry_run import dry_run

GUIDE = ROOT / "docs" / "deploy.md"


def guide_commands() -> list[str]:
    """The `make ...` lines of the shell blocks of the guide's "Step by step" section, without
    their comments."""
    text = GUIDE.read_text()
    section = text[text.index("## Step by step") : text.index("## When it does not work")]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    lines = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line.startswith("make ")]


def test_the_guide_deploys_each_path_and_then_rules_indexes_and_ttl() -> None:
    """The three deploys, then `make rules` and `make ttl` for the two paths that deploy
    functions only (`make deploy-firebase` deploys firestore.rules, the indexes and the TTL
    field override itself: `--only functions,firestore`)."""
    targets = [shlex.split(c)[1] for c in guide_commands()]
    assert targets == ["deploy-firebase", "deploy-gcloud", "deploy-run", "rules", "ttl"]
    makefile = (ROOT / "Makefile").read_text()
    assert "--only functions,firestore" in makefile
    assert re.search(r"\"ttl\":\s*true", (ROOT / "firestore.indexes.json").read_text())


@pytest.mark.parametrize("command", guide_commands())
def test_each_command_plans_as_typed_without_an_account(tmp_path: Path, command: str) -> None:
    """`make -n` of the command exactly as the guide types it: exit 0, no error, and no gcloud
    call (a `gcloud` that fails and records any call is first on PATH)."""
    done = dry_run(tmp_path, *shlex.split(command)[1:], spy=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "error" not in done.stderr, done.stderr
