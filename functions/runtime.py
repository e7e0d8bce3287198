"""The start-up checks of an instance: refuse to serve with settings that would fail every event.

`check_function_settings()`, called by `main.py`, runs the check the served function declared
with `@startup_check(<function name>)` (WEBHOOK_ROUTES, NOTIFY_URL, SEARCH_INDEX_URL...), for
the function named by `FUNCTION_TARGET` only, so an instance fails at start-up with the
`ConfigError` that names the variable, and a sibling's missing setting stops nothing. Importing
a function module checks nothing (tests, the deploy tool and `bench` import them freely).

`main.py` calls `refuse_unsafe_settings(globals())` after declaring the functions. On the
platform (Cloud Run sets `K_SERVICE`; the Functions emulator sets `FUNCTIONS_EMULATOR=true` and
is not the platform), the instance serving `FUNCTION_TARGET` checks the process's `DedupConfig`
(`dedup.entrances.gate.process_config`, the one object every decorated function uses) against the
function's declared timeout, so a misspelled DEDUP_* variable or a lease
shorter than timeout + DEDUP_RPC_TIMEOUT_SECONDS stops the instance at start-up with the
`ConfigError` that says what to set, instead of failing every event. The deploy tooling
(`tools/deploy`) makes the same check before anything is deployed.

Nothing happens elsewhere: tests and local servers deliberately run with short leases.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TypeVar

from dedup.config import DedupConfig
from dedup.entrances.gate import process_config
from dedup.platform.firebase_internals import declared_timeout, on_the_platform

Check = TypeVar("Check", bound=Callable[[], object])

_STARTUP_CHECKS: dict[str, Callable[[], object]] = {}


def startup_check(function_name: str) -> Callable[[Check], Check]:
    """Declare the decorated function (no arguments; raises `ConfigError` on a bad setting) as
    what an instance serving `function_name` checks when it starts (`check_function_settings`)."""

    def register(check: Check) -> Check:
        _STARTUP_CHECKS[function_name] = check
        return check

    return register


def check_function_settings(environ: Mapping[str, str] | None = None) -> None:
    """Run the start-up check the function this instance serves (`FUNCTION_TARGET`) declared,
    on the platform and in the emulator alike; nothing without a target or a declared check."""
    env = os.environ if environ is None else environ
    check = _STARTUP_CHECKS.get(env.get("FUNCTION_TARGET", ""))
    if check is not None:
        check()


def refuse_unsafe_settings(
    functions: Mapping[str, object], environ: Mapping[str, str] | None = None
) -> None:
    """On the platform, raise `ConfigError` when the DEDUP_* settings do not suit the function
    this instance serves (`FUNCTION_TARGET` in `functions`); do nothing anywhere else."""
    env = os.environ if environ is None else environ
    target = env.get("FUNCTION_TARGET", "")
    if not on_the_platform(env) or target not in functions:
        return
    config = process_config() if environ is None else DedupConfig.from_env(env)
    timeout = declared_timeout(functions[target])
    if timeout is not None:
        config.check_lease_covers(timeout)
