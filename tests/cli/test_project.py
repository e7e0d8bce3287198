"""`dedup manifest` and `dedup setup`: retries on in the manifest a deploy reads, and the records'
TTL policy, index exemptions, roles and rules, the same as the template's own files and deploy."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from dedup.cli import cli
from dedup.cli.manifest import retry_gaps, with_retries
from dedup.cli.setup import RECORDS_ROLES, UNINDEXED_FIELDS, rules_block, setup_commands
from tests.cli.conftest import fake_gcloud

ROOT = Path(__file__).resolve().parents[2]
DEDUP = Path(sys.executable).parent / "dedup"
"""The installed `dedup` entry point of this venv."""

MAIN = """
from firebase_functions import firestore_fn, https_fn, scheduler_fn
from dedup import trigger_once


@firestore_fn.on_document_created(document="orders/{id}")
@trigger_once("welcome")
def welcome(event, delivery):
    pass


@scheduler_fn.on_schedule(schedule="every 5 minutes")
@trigger_once("tick")
def tick(event, delivery):
    pass


@scheduler_fn.on_schedule(schedule="every day 04:00")
def plain_schedule(event):
    pass


@https_fn.on_request()
def hello(request):
    return https_fn.Response("hi")
"""
"""A user's main.py: a Firestore trigger and a schedule over trigger_once, a schedule and an
HTTP function without dedup."""


def sdk_like(retry: bool = False) -> dict[str, Any]:
    """A manifest shaped as firebase-functions writes one."""
    return {
        "endpoints": {
            "welcome": {"eventTrigger": {"eventType": "created", "retry": retry}},
            "tick": {"scheduleTrigger": {"schedule": "every 5 minutes"}},
            "plain_schedule": {"scheduleTrigger": {"schedule": "every day"}},
            "hello": {"httpsTrigger": {}},
        }
    }


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A functions source folder outside the repo holding `MAIN` as main.py."""
    folder = tmp_path / "functions"
    folder.mkdir()
    (folder / "main.py").write_text(MAIN)
    return folder


def run_dedup(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run the installed `dedup` entry point from a folder outside the source tree."""
    kwargs.setdefault("cwd", "/")
    return subprocess.run(
        [str(DEDUP), *args], capture_output=True, text=True, timeout=120, check=False, **kwargs
    )


# --- the retry rule, pure -----------------------------------------------------------------------


def test_with_retries_turns_retry_on_for_every_event_trigger_and_dedup_schedules() -> None:
    """Every event trigger gets retry: true; a dedup function's schedule a retryCount >= 1; a
    schedule without dedup and an HTTP function are left as they were; the input is unchanged."""
    sdk = sdk_like()
    done = with_retries(sdk, ["welcome", "tick"])
    assert done["endpoints"]["welcome"]["eventTrigger"]["retry"] is True
    assert done["endpoints"]["tick"]["scheduleTrigger"]["retryConfig"] == {"retryCount": 1}
    assert "retryConfig" not in done["endpoints"]["plain_schedule"]["scheduleTrigger"]
    assert done["endpoints"]["hello"] == {"httpsTrigger": {}}
    assert sdk == sdk_like(), "the SDK's manifest was changed in place"


def test_with_retries_keeps_a_larger_retry_count() -> None:
    """A schedule that already retries 3 times keeps its 3; one at 0 is raised to 1."""
    sdk = sdk_like()
    sdk["endpoints"]["tick"]["scheduleTrigger"]["retryConfig"] = {"retryCount": 3}
    assert with_retries(sdk, ["tick"])["endpoints"]["tick"]["scheduleTrigger"]["retryConfig"] == {
        "retryCount": 3
    }
    sdk["endpoints"]["tick"]["scheduleTrigger"]["retryConfig"] = {"retryCount": 0}
    assert with_retries(sdk, ["tick"])["endpoints"]["tick"]["scheduleTrigger"]["retryConfig"] == {
        "retryCount": 1
    }


def test_retry_gaps_name_each_unretried_dedup_function_and_only_those() -> None:
    """The SDK's manifest leaves both dedup functions unretried; after `with_retries`, none."""
    gaps = retry_gaps(sdk_like(), ["welcome", "tick"])
    assert [gap.split(":")[0] for gap in gaps] == ["tick", "welcome"]
    assert retry_gaps(with_retries(sdk_like(), ["welcome", "tick"]), ["welcome", "tick"]) == []
    assert retry_gaps(sdk_like(), ["missing"]) == ["missing: not in the manifest"]


# --- dedup manifest, the installed command --------------------------------------------------------


@pytest.mark.subprocesses
def test_manifest_writes_retries_on_and_check_refuses_the_sdk_default(source: Path) -> None:
    """Without functions.yaml the SDK would deploy retry: false: --check exits 1 naming both
    dedup functions (not the others). `dedup manifest` then writes functions.yaml with retry:
    true on the Firestore trigger and retryCount 1 on the dedup schedule, and --check passes."""
    refused = run_dedup("manifest", "--check", str(source))
    assert refused.returncode == 1, refused
    assert "welcome" in refused.stderr, refused.stderr
    assert "tick" in refused.stderr, refused.stderr
    assert "plain_schedule" not in refused.stderr
    assert "hello" not in refused.stderr
    assert not (source / "functions.yaml").exists(), "--check wrote a manifest"

    written = run_dedup("manifest", str(source))
    assert written.returncode == 0, written
    manifest = yaml.safe_load((source / "functions.yaml").read_text())
    endpoints = manifest["endpoints"]
    assert endpoints["welcome"]["eventTrigger"]["retry"] is True
    assert endpoints["welcome"]["eventTrigger"]["eventType"].endswith("document.v1.created")
    assert endpoints["tick"]["scheduleTrigger"]["retryConfig"]["retryCount"] >= 1
    assert "httpsTrigger" in endpoints["hello"]
    assert manifest["specVersion"], "not the SDK's manifest"

    checked = run_dedup("manifest", "--check", str(source))
    assert checked.returncode == 0, checked


@pytest.mark.subprocesses
def test_check_reads_a_present_functions_yaml_that_lacks_retry(source: Path) -> None:
    """A functions.yaml whose Firestore trigger lacks `retry` is refused, naming the function."""
    assert run_dedup("manifest", str(source)).returncode == 0
    path = source / "functions.yaml"
    manifest = yaml.safe_load(path.read_text())
    del manifest["endpoints"]["welcome"]["eventTrigger"]["retry"]
    path.write_text(yaml.safe_dump(manifest))
    refused = run_dedup("manifest", "--check", str(source))
    assert refused.returncode == 1
    assert "welcome" in refused.stderr, refused.stderr
    assert "tick" not in refused.stderr, refused.stderr


@pytest.mark.subprocesses
def test_manifest_imports_main_with_the_source_folder_as_cwd_and_on_sys_path(
    source: Path,
) -> None:
    """main.py imports a sibling module and reads a file relative to the working directory, as
    it can under the Firebase CLI; a main.py that fails to import is reported, exit 1."""
    (source / "helpers.py").write_text("NAME = open('name.txt').read().strip()\n")
    (source / "name.txt").write_text("hello\n")
    (source / "main.py").write_text("import helpers\nassert helpers.NAME == 'hello'\n" + MAIN)
    assert run_dedup("manifest", str(source)).returncode == 0
    (source / "main.py").write_text("raise RuntimeError('broken main')\n")
    broken = run_dedup("manifest", str(source))
    assert broken.returncode == 1
    assert "broken main" in broken.stderr, broken.stderr


# --- dedup setup --------------------------------------------------------------------------------


@pytest.mark.subprocesses
def test_setup_dry_run_prints_the_ttl_command_and_the_rules_block() -> None:
    """`dedup setup --project demo-x --dry-run` exits 0, prints the TTL command for the records'
    collection group and one exemption per unindexed field, and shows the rules block."""
    done = run_dedup("setup", "--project", "demo-x", "--dry-run")
    assert done.returncode == 0, done
    lines = done.stdout.splitlines()
    ttl = [line for line in lines if "gcloud firestore fields ttls update expireAt" in line]
    assert len(ttl) == 1, lines
    assert "--collection-group=triggerEvents" in ttl[0]
    assert "--project=demo-x" in ttl[0]
    assert "--enable-ttl" in ttl[0]
    assert sum("indexes fields update" in line for line in lines) == len(UNINDEXED_FIELDS)
    assert rules_block() in done.stderr


def test_setup_runs_each_command_through_gcloud(tmp_path: Path) -> None:
    """Without --dry-run each command of `setup_commands` reaches gcloud with exactly its
    argv, in order (a fake gcloud on PATH records them)."""
    log = fake_gcloud(tmp_path)
    env = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    args = ["setup", "--project", "p1", "--database", "db1", "--collection", "recs"]
    args += ["--service-account", "fn@p1.iam.gserviceaccount.com"]
    result = CliRunner(env=env).invoke(cli, args)
    assert result.exit_code == 0, result.output
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    expected = setup_commands("p1", "db1", "recs", "fn@p1.iam.gserviceaccount.com")
    assert calls == [command[1:] for command in expected]
    assert any(f"--role={RECORDS_ROLES[0]}" in call for call in calls)
    assert "match /recs/{key}" in result.output


def test_setup_stops_at_the_first_failing_gcloud_command(tmp_path: Path) -> None:
    """A gcloud command that fails stops the setup with exit status 1, naming it."""
    fake = tmp_path / "gcloud"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    result = CliRunner(env=env).invoke(cli, ["setup", "--project", "p1", "--only", "ttl"])
    assert result.exit_code == 1
    assert "exited 3" in result.output


# --- the template's files agree with the library ---------------------------------------------


def test_the_templates_index_exemptions_and_rules_are_the_librarys() -> None:
    """firestore.indexes.json exempts exactly `UNINDEXED_FIELDS` of the records (TTL on
    expireAt), and firestore.rules holds `rules_block()`."""
    overrides = json.loads((ROOT / "firestore.indexes.json").read_text())["fieldOverrides"]
    records = [o for o in overrides if o["collectionGroup"] == "triggerEvents"]
    assert sorted(o["fieldPath"] for o in records) == sorted(UNINDEXED_FIELDS)
    assert all(o["indexes"] == [] for o in records)
    assert [o["fieldPath"] for o in records if o.get("ttl")] == ["expireAt"]
    assert rules_block() in (ROOT / "firestore.rules").read_text()


@pytest.mark.subprocesses
def test_make_ttl_runs_the_setup_ttl_command() -> None:
    """`make -n ttl` prints the TTL command of `dedup setup`, for a named database too."""
    for database, expected in (("", "(default)"), ("orders-db", "orders-db")):
        shown = subprocess.run(
            ["make", "-n", "ttl", "PROJECT=demo-x", f"DATABASE={database}"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        commands = [line for line in shown.splitlines() if line.startswith("gcloud")]
        command = setup_commands("demo-x", expected, steps=["ttl"])[0]
        assert commands == [shlex.join(command)], shown


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="the Google Cloud CLI is not installed")
def test_gcloud_accepts_every_argument_of_setup(tmp_path: Path) -> None:
    """Each command of `dedup setup` fails only for want of credentials (a fresh gcloud config
    with no account), never for an argument or flag gcloud refuses."""
    env = {**os.environ, "CLOUDSDK_CONFIG": str(tmp_path), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"}
    commands = setup_commands(
        "demo-x", "orders-db", "triggerEvents", "fn@demo-x.iam.gserviceaccount.com"
    )
    with ThreadPoolExecutor(4) as pool:
        results = list(
            pool.map(
                lambda cmd: subprocess.run(
                    cmd, env=env, capture_output=True, text=True, timeout=300, check=False
                ),
                commands,
            )
        )
    for cmd, result in zip(commands, results, strict=True):
        assert result.returncode != 0, cmd
        assert "active account" in result.stderr, (cmd, result.stderr[-600:])
