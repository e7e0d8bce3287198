"""The region this instance's functions are deployed in, read in one place.

Both deploy paths deploy every function of `main.py` into one region (`REGION`), and put it in
the function's environment as `FUNCTION_REGION`: firebase-tools sets it itself on every 2nd gen
function it deploys; `make deploy-gcloud` writes it into the `--env-vars-file` files
(`tools/deploy`), because Cloud Run functions set no region variable of their own (only
`FUNCTION_TARGET`, `FUNCTION_SIGNATURE_TYPE`, `K_SERVICE`, `K_REVISION`, `K_CONFIGURATION` and
`PORT`).

A task-queue function named without a location (`enqueue_task(tx, "indexPost", ...)`) lives in
that region, so its tasks go to `projects/<project>/locations/<region>/queues/<name>` and target
`https://<region>-<project>.cloudfunctions.net/<name>`. The Admin SDK would otherwise assume
`us-central1`, whatever the region.

On the Cloud Run path (`make deploy-run`) there is no `cloudfunctions.net` URL: the function is
the Cloud Run service named after its entry point (`service_of`), and the plan's env files set
`RUN_SERVICE_URL_TEMPLATE` (`https://{service}-<project number>.{region}.run.app`), so a task
targets its service's `run.app` URL (`task_function_url`). The queue routes it there too (its
`--http-uri-override`); the task's own URL says the same.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from dedup.errors import ConfigError
from dedup.platform.run_names import service_of
from functions.runtime import on_the_platform

REGION_VARIABLE = "FUNCTION_REGION"
"""Set on the functions by every deploy path (firebase-tools itself; `make deploy-gcloud` and
`make deploy-run` by their env files)."""
RUN_URL_VARIABLE = "RUN_SERVICE_URL_TEMPLATE"
"""Set by `make deploy-run` only: the `run.app` URL of a service, with `{service}` and
`{region}` to fill in."""
LOCAL_REGION = "us-central1"
"""The region of the local emulators, which set no `FUNCTION_REGION`."""


def function_region(environ: Mapping[str, str] | None = None) -> str:
    """The functions' region: `FUNCTION_REGION`; `us-central1` locally and in the emulators.
    On the platform without it, `ConfigError` (a deploy that did not go through `make
    deploy-*`), rather than tasks sent to a region where no queue exists."""
    env = os.environ if environ is None else environ
    region = env.get(REGION_VARIABLE, "").strip()
    if region:
        return region
    if on_the_platform(env):
        raise ConfigError(
            f"{REGION_VARIABLE} is not set, so the functions' region is unknown: deploy with "
            "`make deploy-gcloud`, `make deploy-run` or `make deploy-firebase`, or set it to the "
            "region"
        )
    return LOCAL_REGION


def task_function_resource(function_name: str, environ: Mapping[str, str] | None = None) -> str:
    """The task-queue function as `firebase_admin.functions.task_queue` takes it: a bare name
    gets the functions' region (`locations/<region>/functions/<name>`); a name that already
    holds a location is kept as it is."""
    if "/" in function_name:
        return function_name
    return f"locations/{function_region(environ)}/functions/{function_name}"


_LOCATION = re.compile(r"(?:projects/[^/]+/)?locations/([a-z0-9-]+)/functions/([^/]+)")


def task_function_url(function_name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The URL a task of the task-queue function `function_name` targets: on the Cloud Run path
    (`RUN_SERVICE_URL_TEMPLATE` set), its service's `run.app` URL in the function's region (the
    name's own location, else `function_region`); None on the other paths, where the Admin
    SDK's `https://<region>-<project>.cloudfunctions.net/<name>` is the function's URL."""
    env = os.environ if environ is None else environ
    template = env.get(RUN_URL_VARIABLE, "").strip()
    if not template:
        return None
    located = _LOCATION.fullmatch(function_name)
    region, name = located.groups() if located else (function_region(env), function_name)
    return template.format(service=service_of(name), region=region)
