"""The deploy manifest: main.py's functions as the SDK declares them (`sdk_manifest`), checked
and completed for a target (`deploy_manifest`, `firebase_manifest`): timeouts, queue names,
params, Storage trigger regions."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from dedup import kinds
from dedup.cli import dotenv
from dedup.cli.manifest import with_retries
from dedup.config import FUNCTION_TIMEOUT_VARIABLE, DedupConfig
from dedup.errors import ConfigError
from tools.deploy.target import (
    ASGI_KEY,
    BUCKET_PARAM,
    QUEUE_ID,
    ROOT,
    DeployError,
    DeployTimeReads,
    Target,
    default_bucket,
    read_bucket_location,
    read_firestore_location,
    read_project_number,
    read_secret_version,
    serves,
)
from tools.exports import DeclarationError, Exported, exported_functions


def read_now(kind: str, target: Target, *, database: str, bucket: str, secret: str) -> str:
    """The value `DeployTimeReads` planned for `kind`, read now (`python -m tools.deploy read`);
    `DeployError` as when the plan read it itself."""
    if kind == "firestore-location":
        return read_firestore_location(target.project, database or "(default)")
    if kind == "bucket-location":
        return storage_trigger_region({"eventFilters": {"bucket": bucket}}, target)
    if kind == "secret-version":
        return read_secret_version(target.project, secret)
    if kind == "project-number":
        return read_project_number(target.project)
    raise DeployError(
        f"unknown value {kind!r}: firestore-location, bucket-location, secret-version or "
        "project-number"
    )


def sdk_manifest(source: Path = ROOT) -> dict[str, Any]:
    """The manifest firebase-functions builds from the functions `source`/main.py exports
    (`tools.exports`), as a dict; an async function's endpoint is marked `ASGI_KEY: true`.
    `DeployError` names an exported function no deploy path could deploy."""
    from firebase_functions.private.serving import functions_as_yaml

    try:
        exported = exported_functions(source)
    except DeclarationError as exc:
        raise DeployError(str(exc)) from None
    carriers = {f.endpoint.entryPoint or f.name: _Carrier(f) for f in exported}
    manifest = dict(yaml.safe_load(functions_as_yaml(carriers)))
    for function in exported:
        if function.asgi:
            manifest["endpoints"][function.endpoint.entryPoint or function.name][ASGI_KEY] = True
    return manifest


class _Carrier:
    """What `functions_as_yaml` reads of a function: its endpoint and the APIs it requires."""

    def __init__(self, exported: Exported) -> None:
        self.__firebase_endpoint__ = exported.endpoint
        apis = getattr(exported.function, "__required_apis", None)
        if apis is not None:
            setattr(self, "__required_apis", apis)


def is_asgi(endpoint: Mapping[str, Any]) -> bool:
    """True for an async function (`functions.asgi`): only gcloud deploys it, served by ASGI."""
    return bool(endpoint.get(ASGI_KEY))


def endpoints(manifest: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(function name, endpoint) pairs of a manifest, in name order."""
    yield from sorted(manifest.get("endpoints", {}).items())


def kind_of_trigger(endpoint: Mapping[str, Any]) -> kinds.Kind:
    """The kind (`dedup.kinds`) of an endpoint's event trigger: what its deploy needs."""
    trigger = endpoint.get("eventTrigger") or {}
    event_type = trigger.get("eventType")
    return kinds.kind_of(event_type if isinstance(event_type, str) else None)


def trigger_topic(endpoint: Mapping[str, Any]) -> str | None:
    """The topic id of a Pub/Sub trigger, else None."""
    trigger = endpoint.get("eventTrigger") or {}
    if not trigger or kind_of_trigger(endpoint).name != "pubsub":
        return None
    return str(trigger["eventFilters"]["topic"]).rsplit("/", 1)[-1]


def deploy_env(target: Target) -> dict[str, str]:
    """The variables both deploy paths give the functions: `.env`, then `.env.<project>`."""
    files = dotenv.project_env_files(target.source, target.project)
    try:
        return dict(dotenv.load(files))
    except dotenv.EnvFileError as exc:
        raise DeployError(str(exc)) from None


def check_timeouts(manifest: Mapping[str, Any], env: Mapping[str, str]) -> None:
    """Refuse a function without an explicit timeout, or whose dedup lease does not cover it,
    and DEDUP_FUNCTION_TIMEOUT_SECONDS in the env files: each function's own is its deployed
    timeout (`tools.deploy.gcloud.function_env_files`), one value there would be every one's."""
    if env.get(FUNCTION_TIMEOUT_VARIABLE, "").strip():
        raise DeployError(
            f"{FUNCTION_TIMEOUT_VARIABLE} is set in .env or .env.<project>: remove it. It is "
            "each function's own deployed timeout, which `make deploy-gcloud` and `make "
            "deploy-run` set per function and firebase-functions declares (timeout_sec); one "
            "value there would be every function's time budget."
        )
    for name, endpoint in endpoints(manifest):
        timeout = endpoint.get("timeoutSeconds")
        if not isinstance(timeout, int):
            raise DeployError(
                f"{name} declares no timeout: set timeout_sec in functions/__init__.py's "
                "options.set_global_options(...) or in the function's decorator."
            )
        try:
            DedupConfig.from_env(env).check_lease_covers(timeout)
        except ConfigError as exc:
            raise DeployError(f"{name} (timeout {timeout} s): {exc}") from None


def check_queue_names(manifest: Mapping[str, Any]) -> None:
    """Refuse a task-queue function whose name Cloud Tasks would refuse as its queue's id."""
    for name, endpoint in endpoints(manifest):
        if "taskQueueTrigger" in endpoint and not QUEUE_ID.fullmatch(name):
            raise DeployError(
                f"{name} is a task-queue function, and its name is its Cloud Tasks queue's id, "
                "which holds only letters, digits and '-' (at most 100): export it from main.py "
                f"under another name, e.g. {_queue_name_hint(name)} (docs/tasks.md)"
            )


def _queue_name_hint(name: str) -> str:
    head, *rest = [part for part in re.split(r"[^A-Za-z0-9]+", name) if part] or ["task"]
    return (head + "".join(p[:1].upper() + p[1:] for p in rest))[:100]


def deploy_manifest(
    sdk: Mapping[str, Any],
    target: Target,
    env: Mapping[str, str],
    *,
    for_deploy: bool = True,
    reads: DeployTimeReads | None = None,
) -> dict[str, Any]:
    """The SDK's manifest completed for `target` (see the module docstring). `for_deploy`: check
    the timeouts first and put the database's and the bucket's locations on their triggers (the
    other plans need neither). With `reads`, a location not given in `target` is left to be read
    at deploy time (a placeholder, `DeployTimeReads`) instead of being read now."""
    check_queue_names(sdk)
    if for_deploy:
        check_timeouts(sdk, env)
    # Retries on, as `dedup manifest` puts them (every function of this template uses dedup).
    manifest = with_retries(sdk, dedup_functions=[name for name, _ in endpoints(sdk)])
    resolve_params(manifest, target, env)
    locations: dict[str, str] = {}
    for _, endpoint in endpoints(manifest):
        endpoint["region"] = [target.region]
        endpoint["serviceAccountEmail"] = target.service_account_email
        trigger = endpoint.get("eventTrigger")
        if trigger is None:
            continue
        location = kind_of_trigger(endpoint).deploy.location
        if location == "database" and for_deploy:
            database = trigger.get("eventFilters", {}).get("database", "(default)")
            if database not in locations:
                if target.firestore_location:
                    locations[database] = target.firestore_location
                elif reads is not None:
                    locations[database] = reads.firestore_location(database)
                else:
                    locations[database] = read_firestore_location(target.project, database)
            trigger["region"] = locations[database]
        if location == "global":
            trigger["region"] = "global"  # Firebase Alerts are published globally
    for _, endpoint in endpoints(manifest):  # after the databases: each read in turn
        if kind_of_trigger(endpoint).deploy.location == "bucket" and for_deploy:
            trigger = endpoint["eventTrigger"]
            if reads is not None and not target.bucket_location:
                trigger["region"] = reads.bucket_location(str(trigger["eventFilters"]["bucket"]))
            else:
                trigger["region"] = storage_trigger_region(trigger, target)
    return manifest


def target_manifest(target: Target) -> dict[str, Any]:
    """The checked manifest of `target.source`/main.py for `target`."""
    return deploy_manifest(sdk_manifest(target.source), target, deploy_env(target))


def firebase_manifest(target: Target) -> dict[str, Any]:
    """The manifest `make deploy-firebase` hands the Firebase CLI; `DeployError` naming each
    async function, which firebase-tools would serve with the sync server."""
    manifest = target_manifest(target)
    async_functions = [name for name, e in endpoints(manifest) if is_asgi(e)]
    if async_functions:
        raise DeployError(
            "\n".join(
                f"{name} is an async function: `make deploy-firebase` serves sync functions "
                "only; deploy it with `make deploy-gcloud` (docs/async.md)"
                for name in async_functions
            )
        )
    return manifest


_PARAM = re.compile(r"\{\{\s*params\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def resolve_params(manifest: dict[str, Any], target: Target, env: Mapping[str, str]) -> None:
    """Replace each `{{ params.NAME }}` of the endpoints with its deploy-time value: the env
    files' NAME, else the declared default; an empty UPLOAD_BUCKET is the default bucket. Both
    paths thus deploy the same values, and firebase deploy has no parameter left to ask for."""
    declared = {p["name"]: p for p in manifest.pop("params", None) or []}

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in declared:
            raise DeployError(f"the manifest uses params.{name}, which no function declares")
        found = env.get(name, "").strip() or str(declared[name].get("default") or "")
        if name == BUCKET_PARAM and not found:
            return default_bucket(target.project)
        if not found:
            raise DeployError(f"{name} has no value: set it in .env or .env.{target.project}")
        return found

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return _PARAM.sub(value, node)
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    manifest["endpoints"] = walk(manifest.get("endpoints", {}))


def source_apis(endpoint: Mapping[str, Any]) -> tuple[str, ...]:
    """The extra APIs `make bootstrap` enables for a function: its kind's (`dedup.kinds`), the
    schedule's for a scheduled function; none for Firestore, Pub/Sub and task functions."""
    if "scheduleTrigger" in endpoint:
        return kinds.SCHEDULE.apis
    return kind_of_trigger(endpoint).apis


def storage_trigger_region(trigger: Mapping[str, Any], target: Target) -> str:
    """The bucket's location, read now; `DeployError` when REGION cannot serve it."""
    bucket = str(trigger["eventFilters"]["bucket"])
    location = (target.bucket_location or "").lower() or read_bucket_location(
        target.project, bucket
    )
    if not serves(target.region, location):
        raise DeployError(
            f"bucket {bucket} is in {location}, which REGION={target.region} cannot serve: a "
            "Storage trigger must sit in the bucket's region or inside its multi-region. "
            f"Deploy with a REGION in {location}, or name another bucket with UPLOAD_BUCKET."
        )
    return location
