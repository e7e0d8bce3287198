"""`python -m tools.deploy`: the command line the Makefile calls (see `tools.deploy`). It plans
the Cloud Run path with `tools.deploy_run`, the other paths with `tools.deploy`; both build on
`tools.deploy`, which imports neither this module nor `tools.deploy_run`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from tools import deploy, deploy_run
from tools.deploy.gcloud import write_env_files
from tools.deploy.manifest import firebase_manifest, read_now
from tools.deploy.target import DEFAULT_SERVICE_ACCOUNT, GENERATED, DeployError, Target, refused


def plan(what: str, target: Target) -> list[str]:
    """The shell commands of `make WHAT`, in order, on whichever path WHAT belongs to."""
    if what in deploy_run.RUN_PLANS:
        return deploy_run.plan(what, target)
    return deploy.plan(what, target)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.deploy", description=(deploy.__doc__ or "").split("\n")[0]
    )
    parser.add_argument("command", choices=["manifest", "env-files", "plan", "read"])
    parser.add_argument(
        "what", nargs="?", help="manifest: output file; plan: what to plan; read: what to read"
    )
    parser.add_argument("--project", required=True)
    parser.add_argument("--region", required=True)
    parser.add_argument("--firestore-location", default="")
    parser.add_argument("--service-account", default=DEFAULT_SERVICE_ACCOUNT)
    parser.add_argument("--project-number", default="")
    parser.add_argument("--topics", default="", help="extra topics, space-separated")
    parser.add_argument(
        "--alert-channels", default="", help="monitoring: notification channels, space-separated"
    )
    parser.add_argument(
        "--secret-versions", default="", help="deploy-gcloud: pinned secret versions, 'S=3 T=1'"
    )
    parser.add_argument("--bucket-location", default="", help="the Storage bucket's location")
    parser.add_argument("--make", action="store_true", help="plan as one line, ' ;; '-separated")
    parser.add_argument("--database", default="", help="read firestore-location: the database")
    parser.add_argument("--bucket", default="", help="read bucket-location: the bucket")
    parser.add_argument("--secret", default="", help="read secret-version: the secret")
    parser.add_argument("--out", default="", help="read: the file to write the value to")
    return parser


def main(argv: Sequence[str]) -> int:
    """Entry point; see the module docstring. Errors are one line on stderr, exit status 2."""
    args = _parser().parse_args(argv)
    target = Target(
        project=args.project,
        region=args.region,
        firestore_location=args.firestore_location or None,
        service_account=args.service_account or DEFAULT_SERVICE_ACCOUNT,
        project_number=args.project_number or None,
        bucket_location=args.bucket_location or None,
        extra_topics=tuple(args.topics.split()),
        alert_channels=tuple(args.alert_channels.split()),
        secret_versions=tuple(
            (pair.partition("=")[0], pair.partition("=")[2])
            for pair in args.secret_versions.split()
        ),
    )
    try:
        if args.command == "manifest":
            text = GENERATED + yaml.safe_dump(firebase_manifest(target), sort_keys=False)
            if args.what:
                Path(args.what).write_text(text)
            else:
                sys.stdout.write(text)
        elif args.command == "read":
            value = read_now(
                args.what or "", target, database=args.database, bucket=args.bucket,
                secret=args.secret,
            )  # fmt: skip
            if args.out:
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(value + "\n")
            else:
                print(value)
        elif args.command == "env-files":
            for path in write_env_files(target):
                print(f"wrote {path.relative_to(target.source)}")
        else:
            commands = plan(args.what or "", target)
            print(" ;; ".join(commands) if args.make else "\n".join(commands))
    except DeployError as problem:
        return refused(problem)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
