"""Settings a deployed function must refuse: a misspelled DEDUP_* variable, a lease shorter
than its timeout plus the margin. Refused by `DedupConfig.from_env`, and at start-up by an
instance on the platform (a fresh process loading main.py as functions-framework does)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dedup.config import ENVIRONMENT_VARIABLES, DedupConfig
from dedup.errors import ConfigError
from tests.deploy.conftest import ROOT


def test_a_misspelled_variable_is_refused_naming_the_known_ones() -> None:
    """DEDUP_RETENTON_DAYS is not silently ignored: the error suggests the right name and lists
    every variable."""
    with pytest.raises(ConfigError) as error:
        DedupConfig.from_env({"DEDUP_RETENTON_DAYS": "30"})
    message = str(error.value)
    assert "DEDUP_RETENTON_DAYS" in message
    assert "did you mean DEDUP_RETENTION_DAYS?" in message
    for name in ENVIRONMENT_VARIABLES:
        assert name in message


def test_every_known_variable_is_accepted() -> None:
    """The list of known variables is the list `from_env` reads: each one alone is accepted."""
    values = {
        "DEDUP_COLLECTION": "c",
        "DEDUP_ON_PAYLOAD_MISMATCH": "raise",
        "DEDUP_KEY_LAYOUT": "spread",
        "DEDUP_OTEL": "1",
        "DEDUP_ON_GIVE_UP": "nack",
        "DEDUP_FUNCTION_TIMEOUT_SECONDS": "50",  # one the default lease covers
    }
    for name in ENVIRONMENT_VARIABLES:
        DedupConfig.from_env({name: values.get(name, "100")})


@pytest.mark.parametrize(
    ("env", "timeout", "ok"),
    [
        ({}, 50, True),  # 60 >= 50 + 10: the deployed defaults
        ({}, 51, False),
        ({"DEDUP_LEASE_SECONDS": "70"}, 60, True),
        ({"DEDUP_RPC_TIMEOUT_SECONDS": "11"}, 50, False),
        ({"DEDUP_LEASE_SECONDS": "2"}, None, True),  # timeout unknown: not checked (tests)
    ],
)
def test_the_lease_must_cover_the_timeout_plus_the_rpc_deadline(
    env: dict[str, str], timeout: int | None, ok: bool
) -> None:
    """lease_seconds >= function timeout + rpc_timeout_seconds, or a ConfigError that says
    what to set."""
    if ok:
        DedupConfig.from_env(env, function_timeout_seconds=timeout)
        return
    with pytest.raises(ConfigError, match="Set DEDUP_LEASE_SECONDS to at least"):
        DedupConfig.from_env(env, function_timeout_seconds=timeout)


def start(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Load main.py for send_post_notification in a fresh process, with `env` on top."""
    code = (
        "import functions_framework; functions_framework.create_app("
        f"target='send_post_notification', source={str(ROOT / 'main.py')!r}, "
        "signature_type='cloudevent')"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DEDUP_", "K_SERVICE"))}
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**base, "FUNCTION_TARGET": "send_post_notification", **env},
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_deployed_instance_refuses_to_start_with_a_lease_below_its_timeout() -> None:
    """On the platform (K_SERVICE set), DEDUP_LEASE_SECONDS=30 under the declared 50 s timeout
    stops the instance at start-up; the same settings start locally and in the emulator."""
    short = {"DEDUP_LEASE_SECONDS": "30", "NOTIFY_URL": "http://127.0.0.1:1/notify"}
    refused = start({**short, "K_SERVICE": "send-post-notification"})
    assert refused.returncode != 0
    assert "ConfigError" in refused.stderr
    assert "Set DEDUP_LEASE_SECONDS to at least 60" in refused.stderr
    assert start(short).returncode == 0
    emulated = start({**short, "K_SERVICE": "x", "FUNCTIONS_EMULATOR": "true"})
    assert emulated.returncode == 0, emulated.stderr
    fine = start({"K_SERVICE": "x", "NOTIFY_URL": "http://127.0.0.1:1/notify"})
    assert fine.returncode == 0, fine.stderr


def test_a_deployed_instance_refuses_to_start_with_a_misspelled_setting() -> None:
    """A misspelled DEDUP_* variable stops a deployed instance at start-up, naming it."""
    done = start({"K_SERVICE": "x", "DEDUP_MAX_ATEMPTS": "3", "NOTIFY_URL": "http://h/n"})
    assert done.returncode != 0
    assert "did you mean DEDUP_MAX_ATTEMPTS?" in done.stderr
