"""send_post_notification's choice for an ambiguous delivery follows its transport: an HTTP
receiver drops a copy by its Idempotency-Key (rerun), FCM cannot (skip: at most once)."""

from __future__ import annotations

import pytest

from functions.notifier import on_ambiguous_from_env


def test_http_reruns_under_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_URL", "http://127.0.0.1:1/notify")
    assert on_ambiguous_from_env() == "rerun"


@pytest.mark.parametrize("value", [None, "", "  "])
def test_fcm_skips_rather_than_doubling_a_push(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("NOTIFY_URL", raising=False)
    else:
        monkeypatch.setenv("NOTIFY_URL", value)
    assert on_ambiguous_from_env() == "skip"
