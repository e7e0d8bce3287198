"""The gcloud functions path: env files, runtime and trigger flags, secrets, the deploy
commands and the Cloud Scheduler jobs."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from dedup.config import FUNCTION_TIMEOUT_VARIABLE
from tools.deploy.manifest import deploy_env, endpoints, is_asgi, kind_of_trigger, sdk_manifest
from tools.deploy.target import (
    ASGI_VARIABLE,
    MAX_ATTEMPT_DEADLINE,
    MIN_ATTEMPT_DEADLINE,
    REGION_VARIABLE,
    DeployError,
    DeployTimeReads,
    Target,
    read_secret_version,
)
from tools.runtime import RuntimeMismatch, runtime_of_venv


def signature_type(endpoint: Mapping[str, Any]) -> str:
    """How functions-framework must call the function: `cloudevent` or `http`."""
    return "cloudevent" if endpoint.get("eventTrigger") is not None else "http"


def env_kind(endpoint: Mapping[str, Any]) -> str:
    """The name of the env file a function is deployed with: its signature type, prefixed
    with `asgi-` for an async function."""
    return ("asgi-" if is_asgi(endpoint) else "") + signature_type(endpoint)


def env_files(target: Target, env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The --env-vars-file contents per `env_kind`: the env files' variables, what firebase-tools
    sets itself on every function it deploys (`GCLOUD_PROJECT`, `FUNCTION_REGION`, which
    Cloud Run functions do not set: `functions.region`), the signature type
    functions-framework must serve, and `FUNCTION_USE_ASGI=true` for an async function
    (functions-framework's `--asgi`, read from the environment by the `functions-framework`
    command the Python buildpack starts)."""
    base = {**env, "GCLOUD_PROJECT": target.project, REGION_VARIABLE: target.region}
    files = {
        "cloudevent": {**base, "FUNCTION_SIGNATURE_TYPE": "cloudevent"},
        "http": dict(base),
    }
    for kind, values in list(files.items()):
        files[f"asgi-{kind}"] = {**values, ASGI_VARIABLE: "true"}
    return files


def function_env_files(
    manifest: Mapping[str, Any], files: Mapping[str, Mapping[str, str]]
) -> dict[str, dict[str, str]]:
    """Each function's --env-vars-file contents: the file of its kind (`env_kind`) among
    `files`, and `DEDUP_FUNCTION_TIMEOUT_SECONDS`, the timeout it is deployed with (its
    `--timeout`, `runtime_flags`): its deliveries' time budget (`DedupConfig.time_budget`)."""
    result = {}
    for name, endpoint in endpoints(manifest):
        values = dict(files[env_kind(endpoint)])
        timeout = endpoint.get("timeoutSeconds")
        if timeout is not None:
            values[FUNCTION_TIMEOUT_VARIABLE] = str(timeout)
        result[name] = values
    return result


def env_file(folder: Path, function: str) -> Path:
    """Where a function's --env-vars-file lives in `folder`: `<function>.env.yaml`."""
    return folder / f"{function}.env.yaml"


def write_function_env_files(folder: Path, files: Mapping[str, Mapping[str, str]]) -> list[Path]:
    """Write each function's env file (`function_env_files`) under `folder`; their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for function, values in files.items():
        path = env_file(folder, function)
        path.write_text(yaml.safe_dump(dict(values), default_flow_style=False))
        path.chmod(0o600)
        written.append(path)
    return written


def write_env_files(target: Target) -> list[Path]:
    """Write each function's env file of this path under `target.env_dir`; their paths."""
    manifest = sdk_manifest(target.source)
    files = function_env_files(manifest, env_files(target, deploy_env(target)))
    return write_function_env_files(target.env_dir, files)


def _memory(mb: int) -> str:
    return f"{mb // 1024}Gi" if mb % 1024 == 0 else f"{mb}Mi"


def runtime_flags(
    endpoint: Mapping[str, Any], secret_versions: Mapping[str, str] | None = None
) -> list[str]:
    """gcloud flags for the runtime shape the manifest declares (memory, CPU, concurrency,
    instances, timeout, ingress, labels, secrets). Each secret is mounted at the version
    `secret_versions` pins (`secret_versions_of`), as firebase-tools pins the latest version
    at deploy time."""
    flags: list[str] = []
    simple = {
        "cpu": "--cpu={}",
        "concurrency": "--concurrency={}",
        "minInstances": "--min-instances={}",
        "maxInstances": "--max-instances={}",
        "timeoutSeconds": "--timeout={}s",
    }
    if endpoint.get("availableMemoryMb") is not None:
        flags.append(f"--memory={_memory(int(endpoint['availableMemoryMb']))}")
    for key, flag in simple.items():
        value = endpoint.get(key)
        if value == "gcf_gen1":
            raise DeployError("cpu='gcf_gen1' has no gcloud equivalent: declare cpu=1 or more")
        if value is not None:
            flags.append(flag.format(value))
    ingress = endpoint.get("ingressSettings")
    if ingress is not None:
        flags.append(
            f"--ingress-settings={ingress.removeprefix('ALLOW_').lower().replace('_', '-')}"
        )
    labels = endpoint.get("labels") or {}
    if labels:
        flags.append("--update-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())))
    secrets = endpoint.get("secretEnvironmentVariables") or []
    if secrets:
        versions = secret_versions or {}
        pairs = []
        for s in secrets:
            name = s.get("secret") or s["key"]
            pairs.append(f"{s['key']}={name}:{versions.get(name, 'latest')}")
        flags.append("--set-secrets=" + ",".join(pairs))
    return flags


def trigger_flags(name: str, endpoint: Mapping[str, Any], target: Target) -> list[str]:
    """gcloud flags for the function's trigger, retry and trigger identity."""
    if "httpsTrigger" in endpoint or "callableTrigger" in endpoint:
        return ["--trigger-http", "--allow-unauthenticated"]
    if "taskQueueTrigger" in endpoint or "scheduleTrigger" in endpoint:
        return ["--trigger-http", "--no-allow-unauthenticated"]
    trigger = endpoint.get("eventTrigger")
    if trigger is None:
        kinds = sorted(k for k in endpoint if k.endswith("Trigger"))
        raise DeployError(
            f"{name} has a trigger ({', '.join(kinds) or 'unknown'}) that `make deploy-gcloud` "
            "does not deploy: deploy it with `make deploy-firebase`."
        )
    flags = [f"--trigger-service-account={target.service_account_email}"]
    if trigger.get("retry"):
        flags.append("--retry")
    deploy = kind_of_trigger(endpoint).deploy
    flags = [*deploy.gcloud_trigger(trigger), *flags]
    if not deploy.gcloud_location:
        return flags
    if deploy.location == "bucket" and not trigger.get("region"):
        return flags  # the bucket's location is put on the trigger once read (`deploy_manifest`)
    return [*flags, f"--trigger-location={trigger.get('region') or target.region}"]


def secret_names(manifest: Mapping[str, Any]) -> list[str]:
    """The secrets the functions declare, sorted."""
    return sorted(
        {
            s.get("secret") or s["key"]
            for _, e in endpoints(manifest)
            for s in e.get("secretEnvironmentVariables") or []
        }
    )


def secret_versions_of(
    manifest: Mapping[str, Any], target: Target, reads: DeployTimeReads | None = None
) -> dict[str, str]:
    """The version each declared secret is pinned to: `target.secret_versions`, else its latest
    enabled version, read now or, with `reads`, at deploy time. Both paths thus run with the
    version current at deploy time, and a rotated secret reaches the functions with the next
    deploy."""
    pinned = dict(target.secret_versions)
    versions = {}
    for secret in secret_names(manifest):
        if pinned.get(secret):
            versions[secret] = pinned[secret]
        elif reads is not None:
            versions[secret] = reads.secret_version(secret)
        else:
            versions[secret] = read_secret_version(target.project, secret)
    return versions


def deploy_runtime(target: Target) -> str:
    """The runtime (python313...) every path deploys to: the venv's (`tools.runtime`), refused
    with `DeployError` when firebase.json says another, before anything deploys."""
    try:
        return runtime_of_venv(target.source)
    except RuntimeMismatch as exc:
        raise DeployError(str(exc)) from None


def gcloud_deploy_commands(
    manifest: Mapping[str, Any], target: Target, reads: DeployTimeReads | None = None
) -> list[list[str]]:
    """One `gcloud functions deploy` per function of the manifest, same shape as firebase's;
    with `reads`, the secret versions not pinned are read at deploy time."""
    versions = secret_versions_of(manifest, target, reads)
    runtime = deploy_runtime(target)
    commands = []
    for name, endpoint in endpoints(manifest):
        variables = env_file(target.env_dir, name)
        commands.append(
            [
                "gcloud", "functions", "deploy", name, "--gen2", f"--runtime={runtime}",
                f"--region={endpoint['region'][0]}", f"--project={target.project}",
                "--source=.",
                f"--entry-point={endpoint['entryPoint']}",
                f"--service-account={endpoint['serviceAccountEmail']}",
                f"--env-vars-file={variables.relative_to(target.source)}",
                *trigger_flags(name, endpoint, target),
                *runtime_flags(endpoint, versions),
                "--quiet",
            ]
        )  # fmt: skip
    return commands


def schedule_job_name(name: str, region: str) -> str:
    """The Cloud Scheduler job of a scheduled function: firebase-tools' own name for it, so
    either path updates the job the other created."""
    return f"firebase-schedule-{name}-{region}"


def schedule_flags(endpoint: Mapping[str, Any]) -> list[str]:
    """The job settings both paths give: schedule, time zone, retries, attempt deadline."""
    trigger = endpoint["scheduleTrigger"]
    timeout = int(endpoint.get("timeoutSeconds") or MIN_ATTEMPT_DEADLINE)
    deadline = max(min(timeout, MAX_ATTEMPT_DEADLINE), MIN_ATTEMPT_DEADLINE)
    flags = [
        f"--schedule={trigger['schedule']}",
        f"--time-zone={trigger.get('timeZone') or 'UTC'}",
        f"--attempt-deadline={deadline}s",
        "--http-method=POST",
    ]
    retry = trigger.get("retryConfig") or {}
    for key, flag in (
        ("retryCount", "--max-retry-attempts={}"),
        ("maxRetrySeconds", "--max-retry-duration={}s"),
        ("minBackoffSeconds", "--min-backoff={}s"),
        ("maxBackoffSeconds", "--max-backoff={}s"),
        ("maxDoublings", "--max-doublings={}"),
    ):
        if retry.get(key) is not None:
            flags.append(flag.format(retry[key]))
    return flags


def scheduler_plan(manifest: Mapping[str, Any], target: Target) -> list[str]:
    """Create or update each scheduled function's Cloud Scheduler job (after its deploy): it
    POSTs to the function's stable `cloudfunctions.net` URL (a 2nd-gen function answers there
    too, so the plan needs no look-up) with an OIDC token for the runtime service account."""
    plan = []
    for name, endpoint in endpoints(manifest):
        if "scheduleTrigger" not in endpoint:
            continue
        region = endpoint["region"][0]
        where = [f"--location={region}", f"--project={target.project}"]
        job = schedule_job_name(name, region)
        uri = f"https://{region}-{target.project}.cloudfunctions.net/{name}"  # a stable URL
        account = endpoint["serviceAccountEmail"]
        settings = [
            *schedule_flags(endpoint), f"--uri={uri}", f"--oidc-service-account-email={account}",
            f"--oidc-token-audience={uri}", "--quiet",
        ]  # fmt: skip
        describe = shlex.join(["gcloud", "scheduler", "jobs", "describe", job, *where])
        create = shlex.join(
            ["gcloud", "scheduler", "jobs", "create", "http", job, *where, *settings]
        )
        update = shlex.join(
            ["gcloud", "scheduler", "jobs", "update", "http", job, *where, *settings]
        )
        plan.append(f"if {describe} >/dev/null 2>&1; then {update}; else {create}; fi")
    return plan
