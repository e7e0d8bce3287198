"""`dedup setup --edition enterprise|detect`: on a Firestore Enterprise database, which creates no
index by itself, the indexes step creates the indexes the `dedup` commands' queries use.

The commands are checked three ways, none against a real Enterprise database (none is reachable
offline): as built (unit), by gcloud's own parser (each fails only for want of credentials),
and run for real by gcloud against the local fake of Google's APIs (`tests/deploy/fake_google.py`),
whose recorded requests say what Firestore's admin API was asked.
"""

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
from click.testing import CliRunner

from dedup.cli import cli
from dedup.cli.setup import (
    ENTERPRISE_INDEXES,
    RECORDS_ROLES,
    edition_command,
    enterprise_index_commands,
    index_commands,
    role_commands,
    setup_commands,
    ttl_command,
)
from tests.cli.conftest import fake_gcloud
from tests.deploy.fake_google import FakeGoogle, RunningFake

DEDUP = Path(sys.executable).parent / "dedup"
ACCOUNT = "fn@p1.iam.gserviceaccount.com"


def invoke(tmp_path: Path, *args: str) -> Any:
    """`dedup setup ARGS` in-process, with the fake gcloud of `tmp_path` first on PATH."""
    env = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    return CliRunner(env=env).invoke(cli, ["setup", "--project", "p1", *args])


def calls(log: Path) -> list[list[str]]:
    """The argv of each gcloud run, in order."""
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


# --- the commands, as built ---------------------------------------------------------------------


def test_standard_is_the_default_and_its_commands_are_unchanged() -> None:
    """Without an edition the commands are the Standard edition's: TTL, one exemption per
    unindexed field, roles; no index is created."""
    commands = setup_commands("p1", "db1", "recs", ACCOUNT)
    assert commands == setup_commands("p1", "db1", "recs", ACCOUNT, edition="standard")
    assert commands == [
        ttl_command("p1", "db1", "recs"),
        *index_commands("p1", "db1", "recs"),
        *role_commands("p1", ACCOUNT),
    ]
    assert not any("composite" in command for command in commands)


def test_enterprise_creates_each_index_instead_of_exemptions() -> None:
    """On Enterprise the indexes step is one `composite create` per `ENTERPRISE_INDEXES` entry,
    its fields in order with their directions, non-sparse, in the records' collection group
    and database; TTL and roles are the Standard edition's; no field is exempted (Enterprise
    has no automatic index to exempt it from)."""
    commands = setup_commands("p1", "db1", "a/b/recs", ACCOUNT, edition="enterprise")
    creates = enterprise_index_commands("p1", "db1", "a/b/recs")
    assert commands == [
        ttl_command("p1", "db1", "a/b/recs"),
        *creates,
        *role_commands("p1", ACCOUNT),
    ]
    assert len(creates) == len(ENTERPRISE_INDEXES)
    for command, index in zip(creates, ENTERPRISE_INDEXES, strict=True):
        assert command[:5] == ["gcloud", "firestore", "indexes", "composite", "create"]
        assert "--collection-group=recs" in command
        assert "--database=db1" in command
        assert "--project=p1" in command
        assert "--density=dense" in command
        configs = [a.removeprefix("--field-config=") for a in command if "--field-config" in a]
        assert configs == [f"field-path={name},order={order}" for name, order in index.fields]
    assert not any(command[2:5] == ["indexes", "fields", "update"] for command in commands)


def test_only_indexes_on_enterprise_prints_just_the_creations() -> None:
    """`--only indexes --edition enterprise --dry-run` prints the index creations, one a line,
    and nothing else on standard output."""
    result = CliRunner().invoke(
        cli, ["setup", "--project", "p1", "--only", "indexes", "--edition", "enterprise",
              "--dry-run"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines == [
        shlex.join(c) for c in enterprise_index_commands("p1", "(default)", "triggerEvents")
    ]


def test_an_unknown_edition_is_refused() -> None:
    """`--edition` takes standard, enterprise or detect (exit status 2 otherwise); the function
    refuses another edition by name."""
    result = CliRunner().invoke(cli, ["setup", "--project", "p1", "--edition", "premium"])
    assert result.exit_code == 2
    assert "'standard', 'enterprise', 'detect'" in result.output
    with pytest.raises(ValueError, match="premium"):
        setup_commands("p1", edition="premium")  # type: ignore[arg-type]


# --- --edition detect -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "edition"),
    [("ENTERPRISE", "enterprise"), ("STANDARD", "standard"), ("", "standard")],
)
def test_detect_reads_the_edition_from_gcloud(tmp_path: Path, answer: str, edition: str) -> None:
    """`--edition detect` asks `gcloud firestore databases describe` for the database's edition
    (an empty answer: a database from before editions, which is Standard), then runs that
    edition's commands."""
    log = fake_gcloud(tmp_path, answer)
    result = invoke(tmp_path, "--database", "db1", "--edition", "detect",
                    "--service-account", ACCOUNT)  # fmt: skip
    assert result.exit_code == 0, result.output
    expected = setup_commands("p1", "db1", "triggerEvents", ACCOUNT, edition=edition)  # type: ignore[arg-type]
    assert calls(log) == [c[1:] for c in [edition_command("p1", "db1"), *expected]]
    assert f"database db1 is {edition} edition" in result.output


def test_detect_asks_nothing_when_the_indexes_are_not_set_up(tmp_path: Path) -> None:
    """With `--only ttl` (or roles) the edition changes nothing, so detect reads nothing."""
    log = fake_gcloud(tmp_path, "ENTERPRISE")
    result = invoke(tmp_path, "--edition", "detect", "--only", "ttl")
    assert result.exit_code == 0, result.output
    assert calls(log) == [ttl_command("p1", "(default)", "triggerEvents")[1:]]


def test_detect_fails_clearly_when_gcloud_cannot_say(tmp_path: Path) -> None:
    """A describe that fails, or an edition dedup does not know, stops the set-up before any
    change (exit status 1) and names --edition as the way around."""
    log = fake_gcloud(tmp_path, "", describe_exit=1)
    result = invoke(tmp_path, "--edition", "detect")
    assert result.exit_code == 1
    assert "could not read the edition" in result.output
    assert "--edition" in result.output
    assert len(calls(log)) == 1
    other = tmp_path / "other"
    other.mkdir()
    fake_gcloud(other, "PLATINUM")
    result = invoke(other, "--edition", "detect")
    assert result.exit_code == 1
    assert "'platinum'" in result.output
    assert "--edition" in result.output


def test_an_index_made_by_an_earlier_run_is_kept(tmp_path: Path) -> None:
    """An index creation gcloud answers ALREADY_EXISTS is not a failure (a second run goes on);
    any other failure still stops the set-up."""
    script = tmp_path / "bin" / "gcloud"
    script.parent.mkdir()
    script.write_text(
        "#!/bin/sh\necho 'ERROR: (gcloud.firestore.indexes.composite.create) ALREADY_EXISTS: "
        "Index already exists.' >&2\nexit 1\n"
    )
    script.chmod(0o755)
    result = invoke(tmp_path, "--only", "indexes", "--edition", "enterprise")
    assert result.exit_code == 0, result.output
    assert result.output.count("exists already: kept") == len(ENTERPRISE_INDEXES)
    script.write_text("#!/bin/sh\necho 'ERROR: PERMISSION_DENIED' >&2\nexit 1\n")
    result = invoke(tmp_path, "--only", "indexes", "--edition", "enterprise")
    assert result.exit_code == 1
    assert "PERMISSION_DENIED" in result.output
    assert "exited 1" in result.output
    assert "on a Standard-edition database pass --edition standard" in result.output


# --- gcloud's parser, and a real run against the fake ----------------------------------------


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="the Google Cloud CLI is not installed")
@pytest.mark.subprocesses
def test_gcloud_accepts_every_argument_of_enterprise_setup(tmp_path: Path) -> None:
    """Each Enterprise command (the creations and the edition's read) fails only for want of
    credentials (a fresh gcloud config with no account), never for a flag gcloud refuses."""
    env = {**os.environ, "CLOUDSDK_CONFIG": str(tmp_path), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"}
    commands = [edition_command("demo-x", "orders-db"),
                *enterprise_index_commands("demo-x", "orders-db", "triggerEvents")]  # fmt: skip
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(
            lambda cmd: subprocess.run(cmd, env=env, capture_output=True, text=True,
                                       timeout=300, check=False),
            commands,
        ))  # fmt: skip
    for cmd, result in zip(commands, results, strict=True):
        assert result.returncode != 0, cmd
        assert "active account" in result.stderr, (cmd, result.stderr[-600:])


def fake_env(fake: FakeGoogle, home: Path) -> dict[str, str]:
    """gcloud pointed at the fake: a throwaway config, a fake access token, the Firestore and
    Resource Manager endpoints overridden (gcloud's property variables)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDSDK", "GOOGLE"))}
    (home / "token").write_text("fake-access-token")
    env.update(
        CLOUDSDK_CONFIG=str(home / "gcloud"), NO_PROXY="127.0.0.1",
        CLOUDSDK_AUTH_ACCESS_TOKEN_FILE=str(home / "token"),
        CLOUDSDK_CORE_DISABLE_USAGE_REPORTING="true",
        CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK="true",
        CLOUDSDK_API_ENDPOINT_OVERRIDES_FIRESTORE=f"{fake.url}/",
        CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDRESOURCEMANAGER=f"{fake.url}/",
    )  # fmt: skip
    return env


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="the Google Cloud CLI is not installed")
@pytest.mark.subprocesses
def test_setup_creates_the_indexes_through_firestores_admin_api(tmp_path: Path) -> None:
    """`dedup setup --edition detect` run for real (gcloud, no --dry-run) against the fake of
    Google's APIs holding an Enterprise database: it reads the edition, turns TTL on, asks
    Firestore's admin API to create each of `ENTERPRISE_INDEXES` (fields, directions, dense,
    collection scope) in the records' collection group, exempts no field, grants the role.
    Run again, it exits 0 and creates nothing new (each index ALREADY_EXISTS)."""
    database = "projects/p1/databases/ent"
    with RunningFake() as fake:
        fake.resources[database] = {"name": database, "databaseEdition": "ENTERPRISE",
                                    "type": "FIRESTORE_NATIVE"}  # fmt: skip
        env = fake_env(fake, tmp_path)
        args = [str(DEDUP), "setup", "--project", "p1", "--database", "ent", "--edition",
                "detect", "--service-account", ACCOUNT]  # fmt: skip
        first = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
        assert first.returncode == 0, first.stderr[-3000:]
        creations = fake.calls("POST", f"{database}/collectionGroups/triggerEvents/indexes")
        asked = [
            [(f["fieldPath"], f["order"].lower()) for f in call.body["fields"]]
            for call in creations
        ]
        assert asked == [list(index.fields) for index in ENTERPRISE_INDEXES]
        assert all(c.body["density"] == "DENSE" for c in creations)
        assert all(c.body["queryScope"] == "COLLECTION" for c in creations)
        patched = [r.path for r in fake.calls("PATCH", f"{database}/collectionGroups/")]
        assert patched == [f"/v1/{database}/collectionGroups/triggerEvents/fields/expireAt"]
        policy = fake.resources["projects/p1:iam"]
        assert {"role": RECORDS_ROLES[0], "members": [f"serviceAccount:{ACCOUNT}"]} in [
            {k: b[k] for k in ("role", "members")} for b in policy["bindings"]
        ]
        args[-4:] = ["--edition", "enterprise", "--only", "indexes"]  # the creations again
        again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        assert again.stderr.count("exists already: kept") == len(ENTERPRISE_INDEXES)
        stored = [k for k in fake.resources if "/indexes/" in k and "/operations/" not in k]
        assert len(stored) == len(ENTERPRISE_INDEXES)
        assert fake.unknown == []
