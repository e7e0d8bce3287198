"""The account Cloud Build builds the Cloud Run path's functions as, asked of Cloud Build.

`gcloud run deploy --source` builds as Cloud Build's default service account. Which account
that is depends on the project: the Compute Engine default account
(`NUMBER-compute@developer.gserviceaccount.com`) on projects created since Cloud Build changed
its default, the legacy `NUMBER@cloudbuild.gserviceaccount.com` on older ones, or another one
an organisation chose; and the compute account may not exist at all (Compute Engine never
enabled, or the account removed by a policy). So nothing here assumes one: `make bootstrap`
and `make deploy-run` each ask `gcloud builds get-default-service-account` when they run
(its answer written to a file under `.cache/deploy/<project>/at-deploy/`), then grant the
account it names `roles/run.builder`, which a source deploy's build needs (docs/deploy.md, "The
build account"). The grant is idempotent: the deploy repeats it, so it follows the account
Cloud Build uses on the day.
"""

from __future__ import annotations

import shlex

from tools.deploy.target import AT_DEPLOY, Target, shell_join

BUILDER_ROLE = "roles/run.builder"
"""What the account that builds a Cloud Run source deploy needs (Cloud Run's docs)."""


def builder_grant(target: Target) -> list[str]:
    """The commands that ask Cloud Build for the account it builds with in the target's region
    (`gcloud builds get-default-service-account` prints its email; a failure stops the plan)
    and grant it `BUILDER_ROLE` on the project, in that order."""
    folder = (target.env_dir / "at-deploy").relative_to(target.source)
    answer = folder / f"build-account-{target.project}"
    ask = [
        "gcloud", "builds", "get-default-service-account", f"--project={target.project}",
        f"--region={target.region}",
    ]  # fmt: skip
    grant = [
        "gcloud", "projects", "add-iam-policy-binding", target.project,
        f"--member=serviceAccount:{AT_DEPLOY}{answer}{AT_DEPLOY}", f"--role={BUILDER_ROLE}",
        "--condition=None", "--quiet",
    ]  # fmt: skip
    return [
        f"mkdir -p {shlex.quote(str(folder))} && {shell_join(ask)} >{shlex.quote(str(answer))}",
        shell_join(grant) + " >/dev/null",
    ]
