"""The start-up check of a deployed instance: refuse to serve with unsafe dedup settings.

`main.py` calls `refuse_unsafe_settings(globals())` after declaring the functions. On the
platform (Cloud Run sets `K_SERVICE`; the Functions emulator sets `FUNCTIONS_EMULATOR=true` and
is not the platform), the instance serving `FUNCTION_TARGET` builds its `DedupConfig` from the
environment with the function's declared timeout, so a misspelled DEDUP_* variable or a lease
shorter than timeout + DEDUP_RPC_TIMEOUT_SECONDS stops the instance at start-up with the
`ConfigError` that says what to set, instead of failing every event. The deploy tooling
(`tools/deploy.py`) makes the same check before anything is deployed.

Nothing happens elsewhere: tests and local servers deliberately run with short leases.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from dedup.config import DedupConfig


def declared_timeout(function: object) -> int | None:
    """The `timeout_sec` a firebase-functions function declares (its manifest endpoint)."""
    endpoint = getattr(function, "__firebase_endpoint__", None)
    timeout = getattr(endpoint, "timeoutSeconds", None)
    return timeout if isinstance(timeout, int) else None


def on_the_platform(environ: Mapping[str, str]) -> bool:
    """True in a deployed instance (Cloud Run's `K_SERVICE`), False locally and in emulators."""
    return bool(environ.get("K_SERVICE")) and environ.get("FUNCTIONS_EMULATOR") != "true"


def refuse_unsafe_settings(
    functions: Mapping[str, object], environ: Mapping[str, str] | None = None
) -> None:
    """On the platform, raise `ConfigError` when the DEDUP_* settings do not suit the function
    this instance serves (`FUNCTION_TARGET` in `functions`); do nothing anywhere else."""
    env = os.environ if environ is None else environ
    target = env.get("FUNCTION_TARGET", "")
    if not on_the_platform(env) or target not in functions:
        return
    DedupConfig.from_env(env, function_timeout_seconds=declared_timeout(functions[target]))
