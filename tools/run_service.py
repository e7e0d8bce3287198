"""A function's Cloud Run service as the Cloud Run path (`tools.deploy_run`) makes it: its name,
its trigger subscription's settings (ack deadline, backoff, dead-letter attempts) and its env
files."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from dedup.cli.purge_window import LONGEST_REDELIVERY_WINDOW
from dedup.config import DedupConfig
from dedup.errors import ConfigError
from dedup.platform.run_names import run_app_problem, run_app_url, service_of
from functions.region import RUN_URL_VARIABLE
from tools.deploy.gcloud import env_files, function_env_files, write_function_env_files
from tools.deploy.manifest import deploy_env, endpoints, sdk_manifest
from tools.deploy.target import BUCKET_PARAM, DeployError, Target, default_bucket

SERVICE_NAME = re.compile(r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?")
"""Cloud Run's rule for a service name: lowercase letters, digits and '-', starting with a
letter, not ending with '-', at most 63 characters."""
MAX_ACK_DEADLINE = 600
"""Pub/Sub's longest ack deadline: a push subscription waits at most this for an answer, so a
function with a longer timeout would be redelivered while it still runs."""
MIN_RETRY_DELAY, MAX_RETRY_DELAY = 10, 600
"""The subscription's retry backoff (seconds): Eventarc's own, doubling from the first to the
second (docs/platform.md)."""
MIN_DELIVERY_ATTEMPTS, MAX_DELIVERY_ATTEMPTS = 5, 100
"""What Pub/Sub accepts as a dead-letter policy's `maxDeliveryAttempts`."""
SIGNATURE_VARIABLE = "FUNCTION_SIGNATURE_TYPE"
"""Reserved on Cloud Run: the plan never sets it."""
GIVE_UP_VARIABLE, NACK = "DEDUP_ON_GIVE_UP", "nack"
"""What an event function's env file sets unless the project's env files set it: a delivery of
an event dedup gave up on answers 500, so the trigger's dead-letter topic ends up keeping it
(`dedup.config.DedupConfig.on_give_up`, docs/deploy.md)."""
DEAD_LETTER_RETENTION = timedelta(days=7)
"""How long each `<service>-dead-letter` subscription keeps a given-up event (its
`--message-retention-duration`): a redrive may come that long after the event was forwarded."""
RETENTION_VARIABLE = "DEDUP_RETENTION_DAYS"
"""How long a record is kept after its last write (`dedup.config.DedupConfig.retention_days`,
what the TTL policy deletes by)."""


def service_name(function: str, entry_point: str) -> str:
    """The Cloud Run service of a function: its entry point lowercased, `_` -> `-`;
    `DeployError` when Cloud Run would refuse the name (`SERVICE_NAME`)."""
    name = service_of(entry_point)
    if not SERVICE_NAME.fullmatch(name):
        raise DeployError(
            f"{function}: its Cloud Run service would be named {name!r}, which Cloud Run refuses "
            "(lowercase letters, digits and '-', starting with a letter, not ending with '-', "
            "at most 63 characters): export it from main.py under a shorter or plainer name"
        )
    return name


def refuse_unreachable_services(services: Mapping[str, str], number: str) -> None:
    """`DeployError`, one line per function, when a service's `run.app` URL cannot exist in the
    project numbered `number` (`dedup.platform.run_names.run_app_problem`)."""
    problems = [p for f, s in services.items() if (p := run_app_problem(f, s, number))]
    if problems:
        raise DeployError("\n".join(problems))


def service_names(manifest: Mapping[str, Any]) -> dict[str, str]:
    """Function -> its service name; `DeployError` when two functions would share one."""
    names: dict[str, str] = {}
    for function, endpoint in endpoints(manifest):
        name = service_name(function, str(endpoint.get("entryPoint") or function))
        twin = next((f for f, n in names.items() if n == name), None)
        if twin is not None:
            raise DeployError(
                f"{twin} and {function} would both be the Cloud Run service {name}: rename one"
            )
        names[function] = name
    return names


def ack_deadline(function: str, timeout: int) -> int:
    """The subscription's ack deadline: the function's timeout (at least Pub/Sub's 10 s);
    `DeployError` naming the function when it exceeds `MAX_ACK_DEADLINE`."""
    if timeout > MAX_ACK_DEADLINE:
        raise DeployError(
            f"{function} has a timeout of {timeout} s, but an event function on Cloud Run "
            f"functions is pushed by Pub/Sub, which waits at most {MAX_ACK_DEADLINE} s for an "
            f"answer and would redeliver while it runs: declare timeout_sec <= {MAX_ACK_DEADLINE}"
        )
    return max(timeout, 10)


def backoff_gaps(window: float) -> int:
    """How many consecutive backoff delays (`MIN_RETRY_DELAY` doubling up to
    `MAX_RETRY_DELAY`) it takes to span `window` seconds."""
    gaps, spanned, delay = 0, 0.0, MIN_RETRY_DELAY
    while spanned < window:
        spanned += delay
        delay = min(delay * 2, MAX_RETRY_DELAY)
        gaps += 1
    return gaps


def delivery_attempts(lease_seconds: int, timeout: int, max_attempts: int) -> int:
    """The dead-letter policy's `maxDeliveryAttempts` (docs/deploy.md, "Dead letters"): the
    first attempt, the attempts whose backoff delays span `lease_seconds + timeout` (copies that
    meet a live lease answer 500, and each spends an attempt), then one per handler start dedup
    allows (`max_attempts`: a run that fails releases its lease and needs the next attempt),
    within what Pub/Sub accepts."""
    wanted = 1 + backoff_gaps(lease_seconds + timeout) + max_attempts
    return min(max(wanted, MIN_DELIVERY_ATTEMPTS), MAX_DELIVERY_ATTEMPTS)


def dead_letter_topic(service: str) -> str:
    """The dead-letter topic (and the id of its subscription) of a service's trigger."""
    return f"{service}-dead-letter"


def dead_letter_subscription(dead: str, project: str) -> list[str]:
    """`gcloud pubsub subscriptions create` of the subscription `dead` on the dead-letter topic
    `dead`: a 60 s ack deadline, messages kept `DEAD_LETTER_RETENTION`, never expiring."""
    return [
        "gcloud", "pubsub", "subscriptions", "create", dead, f"--topic={dead}", project,
        "--ack-deadline=60", f"--message-retention-duration={DEAD_LETTER_RETENTION.days}d",
        "--expiration-period=never",
    ]  # fmt: skip


def dead_letter_retention_days() -> int:
    """The least `DEDUP_RETENTION_DAYS` of an event function on this path, in whole days: 8.

    The TTL policy deletes a record that many days after its last write. A given-up event is
    forwarded to its dead-letter topic up to the redelivery window after that write (the write
    comes after its first delivery, the forward at the latest when its trigger stops retrying,
    `LONGEST_REDELIVERY_WINDOW`), then kept `DEAD_LETTER_RETENTION`; a redrive that finds no
    record runs the handler again."""
    return math.ceil((LONGEST_REDELIVERY_WINDOW.span + DEAD_LETTER_RETENTION) / timedelta(days=1))


def event_retention(env: Mapping[str, str]) -> str:
    """The `DEDUP_RETENTION_DAYS` an event function's env file holds: `env`'s when it is at
    least `dead_letter_retention_days`, that least when `env` sets none; `DeployError` naming
    both numbers and what to set when `env` sets a smaller one (or one dedup refuses)."""
    needed = dead_letter_retention_days()
    if not env.get(RETENTION_VARIABLE, "").strip():
        return str(needed)
    try:
        days = DedupConfig.from_env({RETENTION_VARIABLE: env[RETENTION_VARIABLE]}).retention_days
    except ConfigError as exc:
        raise DeployError(f"{RETENTION_VARIABLE} in .env or .env.<project>: {exc}") from None
    if days < needed:
        window = LONGEST_REDELIVERY_WINDOW
        hours = int(window.span.total_seconds()) // 3600
        raise DeployError(
            f"{RETENTION_VARIABLE}={days} (.env or .env.<project>) is shorter than the "
            f"{needed} days `make deploy-run` needs: an event given up on reaches its "
            f"dead-letter topic up to {hours} hours after its record's last write (the "
            f"redelivery window of {window.triggers}, {window.source}), and "
            f"<service>-dead-letter keeps it {DEAD_LETTER_RETENTION.days} days; a redrive after "
            f"the TTL policy deleted its record runs the handler again: "
            f"set {RETENTION_VARIABLE}={needed} or more, or remove it (this path then sets "
            f"{needed} for the event functions), docs/deploy.md"
        )
    return str(days)


def run_env_dir(target: Target) -> Path:
    """Where this path's --env-vars-file files live (beside deploy-gcloud's)."""
    return target.env_dir / "run"


def firebase_config(target: Target, env: Mapping[str, str]) -> str:
    """FIREBASE_CONFIG as firebase-tools sets it (the project and its bucket): Storage
    functions and the Admin SDK read it at import."""
    bucket = env.get(BUCKET_PARAM, "").strip() or default_bucket(target.project)
    return json.dumps({"projectId": target.project, "storageBucket": bucket})


def run_env_files(
    target: Target, env: Mapping[str, str], *, events: bool = True
) -> dict[str, dict[str, str]]:
    """The env files of `tools.deploy.gcloud.env_files` without `FUNCTION_SIGNATURE_TYPE` (Cloud
    Run reserves it and sets it itself; each function is served as its trigger says whatever it
    holds, `functions.signature`), with `FIREBASE_CONFIG`, and, when the project number is known
    (the plan always passes it), `RUN_SERVICE_URL_TEMPLATE`: the services' `run.app` URL, which
    the enqueuers give their tasks (`functions.region.task_function_url`). The event functions'
    files (every one has a dead-letter topic) set `DEDUP_ON_GIVE_UP=nack` unless `env` sets it,
    and a `DEDUP_RETENTION_DAYS` that outlasts their dead letters (`event_retention`: a shorter
    one in `env` is a `DeployError`). Without `events` (no event function to deploy) their
    files are left out, and with them the retention's check."""
    files = env_files(target, env)
    if not events:
        files = {kind: v for kind, v in files.items() if not kind.endswith("cloudevent")}
    config = firebase_config(target, env)
    for kind, values in files.items():
        values.pop(SIGNATURE_VARIABLE, None)
        values["FIREBASE_CONFIG"] = config
        if kind.endswith("cloudevent"):
            if not values.get(GIVE_UP_VARIABLE, "").strip():
                values[GIVE_UP_VARIABLE] = NACK
            values[RETENTION_VARIABLE] = event_retention(env)
        if target.project_number:
            values[RUN_URL_VARIABLE] = run_app_url("{service}", "{region}", target.project_number)
    return files


def run_function_env_files(
    target: Target, manifest: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> dict[str, dict[str, str]]:
    """Each function's env file on this path: its kind's `run_env_files` (from `env`, else the
    project's env files, `deploy_env`), and its deployed timeout
    (`tools.deploy.function_env_files`)."""
    events = any(e.get("eventTrigger") is not None for _, e in endpoints(manifest))
    values = deploy_env(target) if env is None else env
    return function_env_files(manifest, run_env_files(target, values, events=events))


def write_run_env_files(target: Target) -> list[Path]:
    """Write each function's env file (`run_function_env_files`) under `run_env_dir`; their
    paths."""
    files = run_function_env_files(target, sdk_manifest(target.source))
    return write_function_env_files(run_env_dir(target), files)
