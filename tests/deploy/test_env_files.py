"""Both deploy paths read `.env.<project>` alike: the gcloud path's parser is Firebase's own.

Each case is parsed by the installed firebase-tools (`lib/functions/env.js`, run with Node.js)
and by `dedup.cli.dotenv`; both must agree, and the expected values are written out so
a reader sees what each line means.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dedup.cli import dotenv
from tests.deploy.conftest import ROOT
from tools.deploy.gcloud import env_files
from tools.deploy.manifest import deploy_env
from tools.deploy.target import Target

ENV_JS = (
    ROOT / "tools" / "firebase" / "node_modules" / "firebase-tools" / "lib" / "functions" / "env.js"
)
CASES: list[tuple[str, dict[str, str]]] = [
    ("A=plain", {"A": "plain"}),
    ("A=x # an inline comment", {"A": "x"}),
    ("# a comment line\nA=1\n\n  # indented comment\nB=2", {"A": "1", "B": "2"}),
    ('A="x # kept"', {"A": "x # kept"}),
    ("A='x # kept'", {"A": "x # kept"}),
    ('A="line\\nbreak"', {"A": "line\nbreak"}),
    ("A='line\\nbreak'", {"A": "line\\nbreak"}),
    ('A="tab\\there \\"quoted\\" back\\\\slash"', {"A": 'tab\there "quoted" back\\slash'}),
    ("A=unquoted\\nstays", {"A": "unquoted\\nstays"}),
    ('A="two\nlines"', {"A": "two\nlines"}),
    ("export A=exported", {"A": "exported"}),
    ("A =  spaced  ", {"A": "spaced"}),
    ("A=", {"A": ""}),
    ('WEBHOOK_ROUTES={"default": "https://h/x?token=a#b"}', {"WEBHOOK_ROUTES": '{"default": "https://h/x?token=a'}),
    ("WEBHOOK_ROUTES='{\"default\": \"https://h/x?token=a#b\"}'", {"WEBHOOK_ROUTES": '{"default": "https://h/x?token=a#b"}'}),
    ("A=1\r\nB=2\r\nC=3", {"A": "1", "B": "2", "C": "3"}),
    ("A=first\nA=second", {"A": "second"}),
    ("A=x\nnot a pair\nB=y", {"A": "x", "B": "y"}),
]  # fmt: skip


def firebase_parse(text: str) -> dict[str, object]:
    """firebase-tools' own `parse` of `text`: {"envs": {...}, "errors": [...]}."""
    script = (
        f"const env = require({json.dumps(str(ENV_JS))});"
        "let s = ''; process.stdin.on('data', d => s += d);"
        "process.stdin.on('end', () => console.log(JSON.stringify(env.parse(s))));"
    )
    done = subprocess.run(
        ["node", "-e", script], input=text, capture_output=True, text=True, check=True
    )
    return dict(json.loads(done.stdout))


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_the_gcloud_path_parses_env_files_as_firebase_does(
    text: str, expected: dict[str, str]
) -> None:
    """Comments, quotes and escapes give the same values (and errors) on both paths."""
    values, errors = dotenv.parse(text)
    assert firebase_parse(text) == {"envs": values, "errors": errors}
    assert values == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("A=x\nnot a pair", "error on lines: not a pair"),
        ("lower=x", "must start with an uppercase ASCII letter"),
        ("FIREBASE_TOKEN=x", "reserved prefix"),
        ("GCLOUD_PROJECT=x", "reserved for internal use"),
    ],
)
def test_a_file_firebase_refuses_is_refused(text: str, problem: str) -> None:
    """What `firebase deploy` refuses, `make deploy-gcloud` refuses too, naming the problem."""
    with pytest.raises(dotenv.EnvFileError, match=problem):
        dotenv.parse_strict(text, ".env.p")


def test_gcloud_env_files_hold_the_project_env_values(project_copy: Path) -> None:
    """`.env` then `.env.<project>` (the later wins), plus what firebase sets itself (the
    project and the region), each function's deployed timeout, in one file per function; and
    the ASGI switch in the async functions' files."""
    (project_copy / ".env").write_text("A=from-env\nB=from-env\n")
    (project_copy / ".env.p1").write_text('B="from \\"project\\"" # comment\n')
    (project_copy / ".env.other").write_text("C=not-this-project\n")
    subprocess.run(
        [sys.executable, "-m", "tools.deploy", "env-files", "--project=p1", "--region=r"],
        cwd=project_copy, check=True, capture_output=True,
    )  # fmt: skip
    folder = project_copy / ".cache" / "deploy" / "p1"
    common = {
        "A": "from-env",
        "B": 'from "project"',
        "GCLOUD_PROJECT": "p1",
        "FUNCTION_REGION": "r",
    }
    timeout = {"DEDUP_FUNCTION_TIMEOUT_SECONDS": "50"}  # functions/__init__.py's timeout_sec
    cloudevent = yaml.safe_load((folder / "sync_published_count.env.yaml").read_text())
    assert cloudevent == {**common, "FUNCTION_SIGNATURE_TYPE": "cloudevent", **timeout}
    assert yaml.safe_load((folder / "create_order.env.yaml").read_text()) == {**common, **timeout}
    asgi = {"FUNCTION_USE_ASGI": "true"}
    target = Target(project="p1", region="r", source=project_copy)
    kinds = env_files(target, deploy_env(target))  # main.py has no async function
    assert kinds["asgi-cloudevent"] == {**common, "FUNCTION_SIGNATURE_TYPE": "cloudevent", **asgi}
    assert kinds["asgi-http"] == {**common, **asgi}
