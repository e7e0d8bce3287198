"""The DEDUP_* environment variables: their names, and their text read as settings.

`dedup.config.DedupConfig.from_env` reads them; every reader here raises `ConfigError` naming
the variable and the accepted form, and an unknown DEDUP_* name is refused with the closest
known one (`refuse_unknown_variables`).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping

from dedup.errors import ConfigError

ENVIRONMENT_VARIABLES = (
    "DEDUP_COLLECTION",
    "DEDUP_LEASE_SECONDS",
    "DEDUP_RETENTION_DAYS",
    "DEDUP_MAX_ATTEMPTS",
    "DEDUP_MIN_RETRY_SECONDS",
    "DEDUP_MAX_EVENT_AGE_SECONDS",
    "DEDUP_CACHE_SIZE",
    "DEDUP_RPC_TIMEOUT_SECONDS",
    "DEDUP_ON_PAYLOAD_MISMATCH",
    "DEDUP_KEY_LAYOUT",
    "DEDUP_DATABASE",
    "DEDUP_OTEL",
    "DEDUP_ON_GIVE_UP",
    "DEDUP_FUNCTION_TIMEOUT_SECONDS",
)
"""Every DEDUP_* variable `DedupConfig.from_env` reads; any other DEDUP_* name is refused."""

FUNCTION_TIMEOUT_VARIABLE = "DEDUP_FUNCTION_TIMEOUT_SECONDS"
"""The deployed timeout of the function an instance serves: `make deploy-gcloud` and `make
deploy-run` put it in each function's environment, equal to the `--timeout` it is deployed with
(`DedupConfig.function_timeout_seconds`)."""

GIVE_UP_ANSWERS = ("ack", "nack")
"""The values of DEDUP_ON_GIVE_UP (case-insensitive; empty or unset: "ack")."""

OTEL_VALUES = {"1": True, "true": True, "0": False, "false": False}
"""The accepted values of DEDUP_OTEL (case-insensitive; empty or unset: off)."""


def telemetry_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether DEDUP_OTEL asks for the OpenTelemetry SDK and Google Cloud exporters
    (`functions.observability`): "1"/"true" on, "0"/"false"/empty/unset off. Raises
    `ConfigError` for any other value."""
    env = os.environ if environ is None else environ
    raw = env.get("DEDUP_OTEL", "").strip().lower()
    if not raw:
        return False
    if raw not in OTEL_VALUES:
        raise ConfigError(
            f"DEDUP_OTEL must be 1 (send traces to Cloud Trace and metrics to Cloud Monitoring) "
            f"or 0 (off); got {env['DEDUP_OTEL']!r}"
        )
    return OTEL_VALUES[raw]


def refuse_unknown_variables(env: Mapping[str, str]) -> None:
    """Raise `ConfigError` for a DEDUP_* name in `env` that is not one of
    `ENVIRONMENT_VARIABLES`, naming the closest one and listing them all."""
    unknown = sorted(n for n in env if n.startswith("DEDUP_") and n not in ENVIRONMENT_VARIABLES)
    if not unknown:
        return
    name = unknown[0]
    close = difflib.get_close_matches(name, ENVIRONMENT_VARIABLES, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ConfigError(
        f"unknown setting {name}{hint}: the DEDUP_* variables are "
        f"{', '.join(ENVIRONMENT_VARIABLES)}. Rename or remove it."
    )


def int_var(get: Callable[[str], str | None], name: str, default: int) -> int:
    """The variable `name` as a whole number (`default` when unset); `ConfigError` if not one."""
    raw = get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be a whole number such as {default}; got {raw!r}") from exc


def float_var(name: str, raw: str) -> float:
    """`raw`, the text of the variable `name`, as a number of seconds; `ConfigError` if not one."""
    try:
        return float(raw)
    except ValueError as exc:
        raise ConfigError(
            f"{name} must be a number of seconds such as 3600, or unset; got {raw!r}"
        ) from exc
