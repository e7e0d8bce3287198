"""`make monitoring`: log-based metrics of the bad outcomes and an alert on dead, without a cloud.

The commands are the ones `make -n monitoring` prints; the installed gcloud parses each with no
credentials (as the deploy commands are checked in test_deploy.py); a fake gcloud on PATH shows
that existing metrics and policy are kept; and the log filters are matched against the lines
dedup really writes for each outcome, on the emulator.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from google.cloud import firestore

from dedup import DedupConfig, Deduplicator, Delivery, LeaseLost, PayloadMismatch, TerminalError
from dedup.logs import LOGGER_NAME, CloudLoggingFormatter
from dedup.telemetry import SEVERITY
from tests.deploy.conftest import ROOT
from tests.deploy.test_deploy import make_commands, needs_gcloud
from tools.deploy.monitoring import (
    ALERT_POLICY_NAME,
    ALERTED_OUTCOME,
    MONITORED_OUTCOMES,
    log_metric_name,
    outcome_log_filter,
)

PROJECT = "demo-parse-only"
CHANNEL = f"projects/{PROJECT}/notificationChannels/1"
MAKE_VARS = [f"PROJECT={PROJECT}", f"ALERT_CHANNELS={CHANNEL}"]


def planned_lines(project: Path = ROOT, **env: str) -> list[str]:
    """The shell lines `make -n monitoring` prints (the PROJECT guard left out)."""
    done = subprocess.run(
        ["make", "-n", "monitoring", *MAKE_VARS], cwd=project, capture_output=True, text=True,
        env={**os.environ, **env},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if "gcloud" in line]


def gcloud_commands(line: str) -> list[list[str]]:
    """The gcloud invocations of one shell line, as argument lists (pipes, || and redirects
    split off)."""
    commands = []
    for alternative in line.split(" || "):
        for stage in alternative.split(" | "):
            words = [w for w in shlex.split(stage) if not w.startswith((">", "2>"))]
            if words and words[0] == "gcloud":
                commands.append(words)
    return commands


def flag(command: list[str], name: str) -> str:
    """The value of `--name=value` in `command`."""
    [value] = [w.split("=", 1)[1] for w in command if w.startswith(f"--{name}=")]
    return value


def test_one_metric_per_monitored_outcome_and_one_alert_on_dead() -> None:
    """Four log-based metrics (failed, dead, lease_lost, payload_mismatch), each created only
    when `describe` does not find it; the alert policy on dedup_dead only when no policy of its
    display name exists; the channels of ALERT_CHANNELS are notified."""
    lines = planned_lines()
    assert len(lines) == 5
    monitored = ["failed", "dead", "lease_lost", "payload_mismatch"]
    for line, outcome in zip(lines, monitored, strict=False):
        describe, create = gcloud_commands(line)
        name = log_metric_name(outcome)
        assert describe[:5] == ["gcloud", "logging", "metrics", "describe", name]
        assert create[:5] == ["gcloud", "logging", "metrics", "create", name]
        assert flag(create, "log-filter") == outcome_log_filter(outcome)
        assert f"--project={PROJECT}" in describe
        assert f"--project={PROJECT}" in create
    assert list(MONITORED_OUTCOMES) == monitored
    errors = [kind.value for kind, level in SEVERITY.items() if level >= logging.ERROR]
    assert list(MONITORED_OUTCOMES) == errors  # dedup's one severity table decides
    assert ALERTED_OUTCOME in MONITORED_OUTCOMES  # the alert's metric is made
    listing, create = gcloud_commands(lines[-1])
    assert listing[:5] == ["gcloud", "alpha", "monitoring", "policies", "list"]
    assert flag(listing, "filter") == f'displayName="{ALERT_POLICY_NAME}"'
    assert create[:5] == ["gcloud", "alpha", "monitoring", "policies", "create"]
    assert flag(create, "display-name") == ALERT_POLICY_NAME
    assert 'metric.type="logging.googleapis.com/user/dedup_dead"' in flag(
        create, "condition-filter"
    )
    assert json.loads(flag(create, "aggregation"))["perSeriesAligner"] == "ALIGN_SUM"
    assert (
        flag(create, "notification-channels") == "projects/demo-parse-only/notificationChannels/1"
    )


@needs_gcloud
def test_gcloud_accepts_every_argument_of_make_monitoring(tmp_path: Path) -> None:
    """Each command fails only for want of credentials, never for an argument gcloud refuses."""
    env = {**os.environ, "CLOUDSDK_CONFIG": str(tmp_path), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"}
    commands = [c for line in planned_lines() for c in gcloud_commands(line)]
    assert len(commands) == 10
    for command in commands:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode != 0, command
        assert "active account" in done.stderr, (command, done.stderr[-600:])
        assert "unrecognized arguments" not in done.stderr, command


FAKE_GCLOUD = """#!/bin/sh
# Records each call; "finds" dedup_dead and the alert policy, nothing else.
echo "$*" >> "{calls}"
case "$*" in
  "logging metrics describe dedup_dead "*) exit 0 ;;
  "logging metrics describe "*) echo "ERROR: NOT_FOUND" >&2; exit 1 ;;
  "alpha monitoring policies list "*) echo "projects/p/alertPolicies/123"; exit 0 ;;
esac
exit 0
"""


def test_existing_metrics_and_policy_are_kept(project_copy: Path, tmp_path: Path) -> None:
    """`make monitoring` run twice creates nothing that already exists: with dedup_dead and the
    policy present, only the three missing metrics are created."""
    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "gcloud"
    fake.write_text(FAKE_GCLOUD.format(calls=calls))
    fake.chmod(0o755)
    done = subprocess.run(
        ["make", "monitoring", *MAKE_VARS], cwd=project_copy, capture_output=True, text=True,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    made = [line for line in calls.read_text().splitlines() if " create " in f" {line} "]
    assert sorted(line.split()[3] for line in made) == [
        "dedup_failed",
        "dedup_lease_lost",
        "dedup_payload_mismatch",
    ]


def matches(log_filter: str, entry: dict[str, object]) -> bool:
    """Evaluate the subset of the Cloud Logging query language the filters use
    (`jsonPayload.F="v"`, `jsonPayload.F:*`, joined by AND) on a structured log line, as
    Cloud Logging stores it: the JSON object as `jsonPayload`."""
    for term in log_filter.split(" AND "):
        if term.endswith(":*"):
            field = term.removesuffix(":*").removeprefix("jsonPayload.")
            if field not in entry:
                return False
        else:
            field, value = term.split("=", 1)
            if entry.get(field.removeprefix("jsonPayload.")) != json.loads(value):
                return False
    return True


class Lines(logging.Handler):
    """Collects the dedup logger's lines as Cloud Logging would parse them."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(CloudLoggingFormatter())
        self.entries: list[dict[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.entries.append(json.loads(self.format(record)))


def _deliveries(client: firestore.Client) -> None:
    """One delivery of each monitored outcome, and some that are not monitored."""

    def make(**settings: object) -> Deduplicator:
        return Deduplicator(DedupConfig(**settings), client=client)  # type: ignore[arg-type]

    def ok(delivery: Delivery) -> None:
        pass

    def fail(delivery: Delivery) -> None:
        raise RuntimeError("503")

    def terminal(delivery: Delivery) -> None:
        raise TerminalError("400")

    def purged(delivery: Delivery) -> None:
        client.document(delivery.path).delete()

    make().run("ran", "s", ok, payload=b"a")
    make().run("ran", "s", ok, payload=b"a")  # duplicate
    make(max_attempts=1, min_retry_seconds=0).run("dead", "s", fail)
    make().run("failed", "s", terminal)
    with pytest.raises(LeaseLost):
        make().run("lost", "s", purged)
    with pytest.raises(PayloadMismatch):
        make(on_payload_mismatch="raise").run("ran", "s", ok, payload=b"b")


def test_each_log_filter_matches_exactly_the_lines_of_its_outcome(
    firestore_client: firestore.Client,
) -> None:
    """The metrics count what dedup logs: each filter matches the delivery lines with its
    outcome and no other line."""
    lines = Lines()
    logger = logging.getLogger(LOGGER_NAME)
    logger.addHandler(lines)
    previous = logger.level
    logger.setLevel(logging.INFO)
    try:
        _deliveries(firestore_client)
    finally:
        logger.removeHandler(lines)
        logger.setLevel(previous)
    outcomes = {entry["outcome"] for entry in lines.entries}
    assert set(MONITORED_OUTCOMES) <= outcomes
    assert {"ran", "duplicate"} <= outcomes
    for outcome in MONITORED_OUTCOMES:
        matched = [e for e in lines.entries if matches(outcome_log_filter(outcome), e)]
        assert matched, outcome
        assert all(e["outcome"] == outcome for e in matched)
        assert len(matched) == sum(e["outcome"] == outcome for e in lines.entries)


@pytest.mark.parametrize("otel", ["1", "0"])
def test_bootstrap_grants_the_telemetry_roles_only_with_dedup_otel(
    project_copy: Path, otel: str
) -> None:
    """With DEDUP_OTEL=1 in the env files the runtime account may write traces and metrics and
    their APIs are enabled; without it, neither."""
    (project_copy / f".env.{PROJECT}").write_text(f"DEDUP_OTEL={otel}\n")
    commands = make_commands(project_copy, "bootstrap")
    roles = {flag(c, "role") for c in commands if "add-iam-policy-binding" in c}
    enable = next(c for c in commands if c[1:3] == ["services", "enable"])
    wanted = {"roles/cloudtrace.agent", "roles/monitoring.metricWriter"}
    apis = {"cloudtrace.googleapis.com", "monitoring.googleapis.com"}
    if otel == "1":
        assert wanted <= roles
        assert apis <= set(enable)
    else:
        assert not wanted & roles
        assert not apis & set(enable)
