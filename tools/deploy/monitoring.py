"""`make monitoring`: a log-based metric per alarming outcome, and an alert on dead events."""

from __future__ import annotations

import shlex

from dedup.kernel.record import OutcomeKind
from dedup.telemetry import ERROR_OUTCOMES
from tools.deploy.project import _describe_or_create
from tools.deploy.target import Target

WHY_MONITORED = {
    OutcomeKind.FAILED: "the handler raised TerminalError (or Firestore refused its data)",
    OutcomeKind.DEAD: "gave up after max_attempts, the effect never happened",
    OutcomeKind.LEASE_LOST: "a delivery outlived its lease and another took it over",
    OutcomeKind.PAYLOAD_MISMATCH: "an event id was reused for a different payload",
}
"""Why each outcome `make monitoring` counts matters: the description of its metric."""

MONITORED_OUTCOMES = {kind.value: WHY_MONITORED[kind] for kind in ERROR_OUTCOMES}
"""Outcomes (the `outcome` field of dedup's log line) `make monitoring` counts, one log-based
metric each, named `dedup_<outcome>`: the outcomes dedup's one severity table
(`dedup.telemetry.SEVERITY`) ranks ERROR, no other (an outcome it ranks ERROR without a line in
`WHY_MONITORED` fails the import)."""


ALERTED_OUTCOME = OutcomeKind.DEAD.value


ALERT_POLICY_NAME = "dedup: dead events"
"""The alert policy's display name: how `make monitoring` finds an existing one."""


def outcome_log_filter(outcome: str) -> str:
    """The Cloud Logging filter of dedup's delivery lines with this outcome (`dedup.logs`:
    the JSON line lands in `jsonPayload`; every delivery line carries `key` and `suffix`)."""
    return f'jsonPayload.outcome="{outcome}" AND jsonPayload.key:* AND jsonPayload.suffix:*'


def log_metric_name(outcome: str) -> str:
    """The log-based metric counting the delivery lines of `outcome`."""
    return f"dedup_{outcome}"


def monitoring_plan(target: Target) -> list[str]:
    """Log-based metrics for `MONITORED_OUTCOMES` and an alert policy on `dead`; existing ones
    are kept (a metric by its name, the policy by its display name)."""
    project = f"--project={target.project}"
    plan = [
        _describe_or_create(
            ["gcloud", "logging", "metrics", "describe", log_metric_name(outcome), project],
            ["gcloud", "logging", "metrics", "create", log_metric_name(outcome), project,
             f"--description=dedup deliveries whose outcome is {outcome}: {why}",
             f"--log-filter={outcome_log_filter(outcome)}"],
        )
        for outcome, why in MONITORED_OUTCOMES.items()
    ]  # fmt: skip
    metric = f"logging.googleapis.com/user/{log_metric_name(ALERTED_OUTCOME)}"
    aggregation = (
        '{"alignmentPeriod": "60s", "perSeriesAligner": "ALIGN_SUM", '
        '"crossSeriesReducer": "REDUCE_SUM"}'
    )
    channels = [f"--notification-channels={','.join(target.alert_channels)}"]
    create = [
        "gcloud", "alpha", "monitoring", "policies", "create", project,
        f"--display-name={ALERT_POLICY_NAME}",
        "--condition-display-name=an event was given up (dedup outcome dead)",
        f'--condition-filter=metric.type="{metric}" AND resource.type="cloud_run_revision"',
        f"--aggregation={aggregation}", "--if=> 0", "--duration=0s", "--trigger-count=1",
        "--combiner=OR",
        "--documentation=A delivery reached max_attempts and its record is dead: the effect "
        "of the event never happened. Find it in Logs Explorer with "
        f"`{outcome_log_filter(ALERTED_OUTCOME)}`, fix the cause, then `dedup revive --state "
        "dead --suffix SUFFIX` (docs/operations.md).",
        *(channels if target.alert_channels else []),
        "--quiet",
    ]  # fmt: skip
    listing = [
        "gcloud", "alpha", "monitoring", "policies", "list", project,
        f'--filter=displayName="{ALERT_POLICY_NAME}"', "--format=value(name)",
    ]  # fmt: skip
    plan.append(f"{shlex.join(listing)} | grep -q . || {shlex.join(create)}")
    return plan
