"""On the Cloud Run path an event function's records outlive its dead letters.

The TTL policy deletes a record `DEDUP_RETENTION_DAYS` after its last write. An event dedup (or
Pub/Sub) gives up on is forwarded to `<service>-dead-letter` up to the redelivery window (24
hours, `LONGEST_REDELIVERY_WINDOW`) after that write, and that subscription keeps it as long as
`make deploy-run` says (`--message-retention-duration`); a redrive that finds no record runs
the handler again. So the plan's env file of every event function holds a retention covering
both (8 days), keeps a longer one the project sets, and refuses a shorter one, naming both
numbers. The dry run is the user's own (`make -n deploy-run`, no account); the env files are
the ones its `env-files` command writes. `tests/deploy/test_give_up_route.py` checks the same
on the Pub/Sub emulator: the record of a dead-lettered event expires after its dead letter.
"""

from __future__ import annotations

import math
import re
import shlex
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup.cli.purge_window import LONGEST_REDELIVERY_WINDOW
from dedup.config import DedupConfig
from tests.deploy.test_function_timeout_env import make_n
from tests.deploy.test_run_plan import EVENT_FUNCTIONS
from tools.deploy.target import DeployError, Target
from tools.run_service import run_env_files, run_function_env_files

VARIABLE = "DEDUP_RETENTION_DAYS"
DAY = timedelta(days=1)
NEEDED = math.ceil((LONGEST_REDELIVERY_WINDOW.span + timedelta(days=7)) / DAY)
"""What the plan's dead-letter subscriptions (7 days) need: 8 days."""
TARGET = Target(project="demo-x", region="europe-west1")
DURATION = re.compile(r"--message-retention-duration=(\d+)([smhd])\b")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def dead_letter_retentions(lines: list[str]) -> dict[str, timedelta]:
    """Service -> the `--message-retention-duration` its `<service>-dead-letter` subscription
    is created with, as the plan prints it."""
    found = {}
    for line in lines:
        match = re.search(r"gcloud pubsub subscriptions create (\S+)-dead-letter ", line)
        if match:
            [(amount, unit)] = DURATION.findall(line)
            found[match.group(1)] = timedelta(**{UNITS[unit]: int(amount)})
    return found


@pytest.mark.subprocesses
def test_every_event_function_keeps_its_records_as_long_as_its_dead_letters(
    project_copy: Path,
) -> None:
    """`make -n deploy-run`, its env files written as the deploy writes them: each event
    function's `DEDUP_RETENTION_DAYS` (as dedup reads it) spans the redelivery window plus its
    dead-letter subscription's retention in the same plan."""
    done = make_n(project_copy, "deploy-run")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    [writes] = [line for line in lines if " -m tools.deploy_run env-files " in line]
    subprocess.run(writes, shell=True, cwd=project_copy, check=True, capture_output=True)
    kept = dead_letter_retentions(lines)
    assert len(kept) == len(EVENT_FUNCTIONS), kept
    for line in lines:
        if not line.startswith("gcloud run deploy "):
            continue
        words = shlex.split(line)
        service = words[3]
        if service not in kept:
            continue
        [path] = [w.partition("=")[2] for w in words if w.startswith("--env-vars-file=")]
        variables = yaml.safe_load((project_copy / path).read_text())
        days = DedupConfig.from_env(variables).retention_days
        needed = LONGEST_REDELIVERY_WINDOW.span + kept[service]
        assert days * DAY >= needed, (service, days, needed)


@pytest.mark.subprocesses
def test_a_shorter_retention_in_the_env_files_is_refused_naming_both_numbers(
    project_copy: Path,
) -> None:
    """`DEDUP_RETENTION_DAYS=7` in `.env`: the plan stops (exit 2) before any command, saying
    what was set, what this path needs and what to set."""
    (project_copy / ".env").write_text(f"{VARIABLE}=7\n")
    done = make_n(project_copy, "deploy-run")
    assert done.returncode != 0, done.stdout
    assert f"{VARIABLE}=7" in done.stderr, done.stderr
    assert f"set {VARIABLE}={NEEDED} or more" in done.stderr, done.stderr
    assert "gcloud run deploy" not in done.stdout


@settings(max_examples=25, deadline=None)
@given(days=st.one_of(st.none(), st.integers(min_value=1, max_value=400)))
def test_the_env_files_hold_the_larger_of_the_projects_and_the_paths(days: int | None) -> None:
    """Unset: the event functions' files say 8 and the HTTP ones keep dedup's default. Set: a
    value of 8 or more is every file's; a smaller one is refused for the event functions'
    files, naming it and 8."""
    env = {} if days is None else {VARIABLE: str(days)}
    if days is not None and days < NEEDED:
        with pytest.raises(DeployError) as refused:
            run_env_files(TARGET, env)
        assert f"{VARIABLE}={days} " in str(refused.value)
        assert f"set {VARIABLE}={NEEDED} or more" in str(refused.value)
        return
    files = run_env_files(TARGET, env)
    for kind in ("cloudevent", "asgi-cloudevent"):
        assert files[kind][VARIABLE] == str(days or NEEDED), kind
    for kind in ("http", "asgi-http"):
        assert files[kind].get(VARIABLE) == (None if days is None else str(days)), kind


def test_a_project_without_event_functions_may_keep_a_shorter_retention() -> None:
    """The refusal is about dead letters: a manifest with only HTTP functions writes what the
    project set."""
    manifest = {"endpoints": {"hello": {"httpsTrigger": {}, "timeoutSeconds": 30}}}
    files = run_function_env_files(TARGET, manifest, {VARIABLE: "3"})
    assert files["hello"][VARIABLE] == "3"
