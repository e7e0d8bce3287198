"""Config: documented defaults, DEDUP_* overrides, and errors that name the bad setting."""

from __future__ import annotations

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
