"""Deployment plans for the Makefile, all built from the one manifest `main.py` declares.

    venv/bin/python -m tools.deploy manifest [OUT] [OPTIONS]   # functions.yaml for firebase
    venv/bin/python -m tools.deploy env-files OPTIONS          # gcloud's --env-vars-file files
    venv/bin/python -m tools.deploy plan WHAT OPTIONS [--make] # shell commands, one per line
        WHAT: deploy-gcloud | bootstrap | topics | queues | monitoring
              | deploy-run | bootstrap-run | run-names (tools.deploy_run: the Cloud Run path)
    venv/bin/python -m tools.deploy read KIND OPTIONS [--out=FILE] # one deploy-time value
        KIND: firestore-location [--database=D] | bucket-location --bucket=B
              | secret-version --secret=S | project-number
    OPTIONS: --project=P --region=R [--firestore-location=L] [--bucket-location=L]
             [--service-account=NAME]
             [--project-number=N] [--topics="a b"] [--alert-channels="c1 c2"]
             [--secret-versions="SECRET=3 OTHER=1"]

`make deploy-firebase`, `make deploy-gcloud`, `make bootstrap`, `make topics`, `make queues` and
`make monitoring` call these; `make -n TARGET` prints the planned commands (with `--make` the
plan is one line that the Makefile splits back into recipe lines). Planning asks gcloud
nothing: a value only the project knows (a secret's latest version, the database's or the
bucket's location, the project's number) and not given as an option is read when the plan runs,
by a `read` command the plan puts before the commands that use it (`DeployTimeReads`), so
`make -n` needs no account and no network. See docs/deploy.md for the
first deploy, docs/observability.md for `make monitoring`.

The manifest is the SDK's own (firebase-functions builds it from `main.py`, runtime shape
included), completed with what depends on the target project:

* `retry: true` on every event trigger (`dedup.cli.manifest.with_retries`, the code of
  `dedup manifest`): firebase-functions-python writes `retry: false` for Firestore triggers
  (firebase/firebase-functions-python#165), and without retries a released lease is never
  retried. The Firebase CLI reads a static `functions.yaml` in the source folder instead of
  asking the SDK, so `make deploy-firebase` writes this one, deploys, and removes it.
* `region: [REGION]` on every function, and the Firestore database's location on every
  Firestore trigger (`--firestore-location`, else read with `gcloud firestore databases
  describe` when the manifest is written, at deploy time; a multi-region database such as nam5
  or eur3 keeps its own name).
* the runtime service account (`make bootstrap` creates it) on every function.

The functions are the ones main.py exports (`tools.exports`): an export no path can deploy is
an error naming it, never dropped. An async function (`functions.asgi`) is marked `x-asgi`:
only `make deploy-gcloud` deploys it, with `FUNCTION_USE_ASGI=true`. A task-queue function
whose name is no valid queue id is refused by every plan. Secrets are pinned, on both paths,
to the version that is the latest at deploy time.

The runtime (`--runtime=python313`...) is the venv's Python's (`deploy_runtime`, from
`tools.runtime`, the one place every deploy path asks); a firebase.json that says another is
refused, naming both, before anything deploys.

Before anything is planned, every function's timeout is checked against the dedup lease of the
env files both paths deploy (`.env`, then `.env.<project>`, read as Firebase reads them):
`DedupConfig.check_lease_covers(timeout)` refuses a lease shorter than
timeout + DEDUP_RPC_TIMEOUT_SECONDS, and a misspelled DEDUP_* variable.

Its modules, by job, each name imported from the module that defines it: `target` (`Target`,
`DeployError`, values read at deploy time and the gcloud reads), `manifest` (main.py's
functions, checked and completed), `gcloud` (the gcloud functions path and the scheduler),
`project` (topics, queues, bootstrap), `monitoring`; `__main__` is the command line. The package
itself holds `plan`, which chooses among them.
"""

from __future__ import annotations

from tools.deploy.gcloud import gcloud_deploy_commands, scheduler_plan
from tools.deploy.manifest import deploy_env, deploy_manifest, sdk_manifest
from tools.deploy.monitoring import monitoring_plan
from tools.deploy.project import bootstrap_plan, queues_plan, topics_plan
from tools.deploy.target import DeployError, DeployTimeReads, Target, shell_join

__all__ = ["plan"]


def plan(what: str, target: Target) -> list[str]:
    """The shell commands of `make WHAT`, in order, for the firebase and gcloud paths (the Cloud
    Run path's: `tools.deploy_run.plan`; `python -m tools.deploy plan` chooses)."""
    if what == "monitoring":
        return monitoring_plan(target)
    env = deploy_env(target)
    for_deploy = what == "deploy-gcloud"
    reads = DeployTimeReads(target)
    manifest = deploy_manifest(
        sdk_manifest(target.source), target, env, for_deploy=for_deploy, reads=reads
    )
    if what == "deploy-gcloud":
        deploys = [shell_join(c) for c in gcloud_deploy_commands(manifest, target, reads)]
        return reads.plan() + deploys + scheduler_plan(manifest, target)
    if what == "topics":
        return topics_plan(manifest, target)
    if what == "queues":
        return queues_plan(manifest, target)
    if what == "bootstrap":
        commands = bootstrap_plan(manifest, target, env, reads)
        return reads.plan() + commands
    raise DeployError(
        f"unknown plan {what!r}: deploy-gcloud, deploy-run, bootstrap, bootstrap-run, topics, "
        "queues or monitoring"
    )
