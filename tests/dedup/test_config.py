"""Config: documented defaults, DEDUP_* overrides, and errors that name the bad setting."""

from __future__ import annotations

import dataclasses

import pytest

from dedup import DedupConfig
from dedup.errors import ConfigError, DedupError


def test_defaults() -> None:
    """With no DEDUP_* variables the documented defaults apply."""
    config = DedupConfig.from_env({})
    assert config.collection == "triggerEvents"
    assert config.lease_seconds == 60
    assert config.retention_days == 7
    assert config.max_attempts == 10
    assert config.max_event_age_seconds is None
    assert config.cache_size == 1000
    assert config.on_payload_mismatch == "log"
    assert config.database is None  # the triggering event's database, else (default)
    assert config.otel is False


def test_environment_overrides() -> None:
    """Each DEDUP_* variable overrides its setting; project falls back to GCLOUD_PROJECT."""
    config = DedupConfig.from_env(
        {
            "DEDUP_COLLECTION": "dedup/app/events",
            "DEDUP_LEASE_SECONDS": "120",
            "DEDUP_RETENTION_DAYS": "30",
            "DEDUP_MAX_ATTEMPTS": "3",
            "DEDUP_MAX_EVENT_AGE_SECONDS": "3600",
            "DEDUP_ON_PAYLOAD_MISMATCH": "raise",
            "GCLOUD_PROJECT": "p1",
        }
    )
    assert (config.collection, config.lease_seconds, config.retention_days) == (
        "dedup/app/events",
        120,
        30,
    )
    assert (config.max_attempts, config.max_event_age_seconds) == (3, 3600.0)
    assert config.on_payload_mismatch == "raise"
    assert config.project == "p1"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DEDUP_LEASE_SECONDS", "soon"),
        ("DEDUP_LEASE_SECONDS", "0"),
        ("DEDUP_MAX_ATTEMPTS", "0"),
        ("DEDUP_RETENTION_DAYS", "-1"),
        ("DEDUP_MAX_EVENT_AGE_SECONDS", "-5"),
        ("DEDUP_MAX_EVENT_AGE_SECONDS", "old"),
        ("DEDUP_COLLECTION", "a/b"),
        ("DEDUP_ON_PAYLOAD_MISMATCH", "ignore"),
    ],
)
def test_bad_value_names_the_variable(variable: str, value: str) -> None:
    """A malformed variable raises ConfigError (a DedupError and ValueError) naming it."""
    with pytest.raises(ConfigError, match=variable) as raised:
        DedupConfig.from_env({variable: value})
    assert isinstance(raised.value, DedupError)
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize(
    ("lease", "rpc", "budget"),
    [("1", 1, 1.0), ("2", 1, 1.0), ("3", 1, 2.0), ("5", 1, 4.0), ("10", 3, 7.0), ("60", 10, 50.0)],
)
def test_an_unset_rpc_timeout_follows_the_lease(lease: str, rpc: int, budget: float) -> None:
    """DEDUP_RPC_TIMEOUT_SECONDS unset: a third of the lease, 1 to 10 s, so a short lease still
    leaves a working budget: DEDUP_LEASE_SECONDS=5 gives 4 s, where a 10 s timeout left the
    1 s floor to every delivery of a function without a declared timeout."""
    config = DedupConfig.from_env({"DEDUP_LEASE_SECONDS": lease})
    assert config.rpc_timeout_seconds == rpc
    assert config.time_budget().seconds == budget
    assert DedupConfig(lease_seconds=int(lease)) == config


def test_a_replaced_lease_takes_its_own_rpc_timeout() -> None:
    """`dataclasses.replace` with another lease: an unset timeout follows the new lease (a test
    shortening the lease gets a working budget, not the old lease's 10 s and the 1 s floor);
    a set one is kept."""
    short = dataclasses.replace(DedupConfig(), lease_seconds=5)
    assert short.rpc_timeout_seconds == 1
    assert short.time_budget().seconds == 4.0
    assert dataclasses.replace(short, lease_seconds=60).rpc_timeout_seconds == 10
    kept = dataclasses.replace(DedupConfig(rpc_timeout_seconds=10), lease_seconds=5)
    assert kept.rpc_timeout_seconds == 10


def test_a_set_rpc_timeout_is_kept() -> None:
    """Only an RPC timeout left unset follows the lease; one set, in the environment or in
    code, 10 included, is the one in force (a deliberate 1 s budget stays possible)."""
    env = {"DEDUP_LEASE_SECONDS": "5", "DEDUP_RPC_TIMEOUT_SECONDS": "2"}
    assert DedupConfig.from_env(env).rpc_timeout_seconds == 2
    env["DEDUP_RPC_TIMEOUT_SECONDS"] = "10"
    assert DedupConfig.from_env(env).time_budget().seconds == 1.0
    assert DedupConfig(lease_seconds=5, rpc_timeout_seconds=10).rpc_timeout_seconds == 10
    assert DedupConfig().rpc_timeout_seconds == 10
    with pytest.raises(ConfigError, match="DEDUP_RPC_TIMEOUT_SECONDS"):
        DedupConfig(rpc_timeout_seconds=0)
