"""A function's Cloud Run service, its `run.app` URL, and whether that URL can exist.

A 2nd gen Cloud Function, and a function `gcloud run deploy --function` deploys, is a Cloud Run
service named after the function: its name lowercased, `_` becoming `-`. Cloud Run gives a
service the URL `https://<service>-<project number>.<region>.run.app`, known before the deploy,
only when `<service>-<project number>` fits one DNS label: `RUN_APP_LABEL_LIMIT` characters.
A longer one gets no such URL, so a scheduler job, a queue route or a redrive aimed at it points
nowhere, silently. `run_app_problem` says so, naming the function and how to rename it; the
template's `make deploy-run` refuses such a function and `dedup manifest --check
--project-number=N` warns about it.
"""

from __future__ import annotations

RUN_APP_LABEL_LIMIT = 63
"""The longest `<service>-<project number>` Cloud Run gives a `run.app` URL (a DNS label)."""


def service_of(function: str) -> str:
    """The Cloud Run service a function deploys as: its name lowercased, `_` -> `-`."""
    return function.lower().replace("_", "-")


def run_app_label(service: str, project_number: str) -> str:
    """The first label of the service's deterministic `run.app` host."""
    return f"{service}-{project_number}"


def run_app_url(service: str, region: str, project_number: str) -> str:
    """The service's deterministic `run.app` URL (it exists when `run_app_problem` is None)."""
    return f"https://{run_app_label(service, project_number)}.{region}.run.app"


def run_app_problem(function: str, service: str, project_number: str) -> str | None:
    """Why `function`, deployed as the Cloud Run `service`, would get no deterministic `run.app`
    URL in the project numbered `project_number` (the function, the length, the limit and how
    to rename it); None when it fits."""
    label = run_app_label(service, project_number)
    if len(label) <= RUN_APP_LABEL_LIMIT:
        return None
    longest = RUN_APP_LABEL_LIMIT - 1 - len(project_number)
    return (
        f"{function}: its Cloud Run service {service} and the project number make "
        f"{label!r}, {len(label)} characters, over the {RUN_APP_LABEL_LIMIT} Cloud Run allows "
        f"for a run.app URL, so https://{label}.REGION.run.app would not exist and whatever "
        f"calls it (a schedule, a task queue, a redrive) would reach nothing: rename the "
        f"function (in main.py, its exported name) to at most {longest} characters, which "
        "renames the service"
    )
