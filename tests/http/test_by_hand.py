"""docs/emulators.md's recipe for calling an HTTP function by hand works as typed: a token from
`tools/emulators.py token`, the URL from `tools/emulators.py url`, a POST with a key."""

from __future__ import annotations

import subprocess
import sys

import pytest
import requests

from dedup.http import firebase_uid
from tests.plugin import new_key, request_headers
from tools.emulators import ROOT

pytestmark = pytest.mark.needs_emulators  # the Auth and Functions emulators of `make test`


def emulators_tool(*args: str) -> str:
    """`venv/bin/python tools/emulators.py ARGS...`, its output (it must exit 0)."""
    done = subprocess.run(
        [sys.executable, "tools/emulators.py", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_token_and_the_url_place_an_order_through_the_functions_emulator(
    auth_host: str,
) -> None:
    """The token is a valid ID token of a new user; the order it places answers 201, and
    the same request again is replayed."""
    token = emulators_tool("token")
    uid = firebase_uid(token)
    url = emulators_tool("url", "create_order")
    assert url.endswith("/demo-exactly-once/us-central1/create_order")
    headers = {**request_headers(None, new_key()), "Authorization": f"Bearer {token}"}
    order = {"item": "coffee", "quantity": 2}
    first = requests.post(url, json=order, headers=headers, timeout=120)
    assert first.status_code == 201, first.text
    again = requests.post(url, json=order, headers=headers, timeout=120)
    assert (again.status_code, again.json()) == (201, first.json())
    assert again.headers["Idempotent-Replayed"] == "true"
    assert uid
