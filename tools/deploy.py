"""Deployment helpers the Makefile calls: the functions manifest, and env files for gcloud.

    venv/bin/python tools/deploy.py manifest [OUT]     # functions.yaml with retries on
    venv/bin/python tools/deploy.py env-yaml ENV OUT   # .env.<project> -> gcloud --env-vars-file

Why a manifest: the Firebase CLI learns the functions by asking the Python SDK for a manifest
(`/__/functions.yaml`), and firebase-functions-python always writes `retry: false` for
Firestore triggers (firebase/firebase-functions-python#165). Without retries a released lease
is never retried and the event is lost. The CLI reads a static `functions.yaml` in the source
folder instead when one exists, so `make deploy-firebase` writes this one (the SDK's own
manifest with `retry: true` on every event trigger), deploys, and removes it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent


def sdk_manifest() -> dict[str, Any]:
    """The manifest firebase-functions builds from main.py, as a dict."""
    from firebase_functions.private.serving import functions_as_yaml, get_functions

    cwd = Path.cwd()
    os.chdir(ROOT)  # get_functions() imports ./main.py
    try:
        return dict(yaml.safe_load(functions_as_yaml(get_functions())))
    finally:
        os.chdir(cwd)


def with_retries(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest with `retry: true` on every event-triggered endpoint."""
    for endpoint in manifest.get("endpoints", {}).values():
        if "eventTrigger" in endpoint:
            endpoint["eventTrigger"]["retry"] = True
    return manifest


def parse_dotenv(text: str) -> dict[str, str]:
    """KEY=VALUE lines (comments, blanks and surrounding quotes handled), as Firebase reads them."""
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip().isidentifier():
            raise SystemExit(
                f"error: line {number} of the env file is not KEY=VALUE: {line[:40]!r}"
            )
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key.strip()] = value
    return values


def gcloud_env(env_file: Path) -> dict[str, str]:
    """The variables of `env_file` (if it exists) plus the CloudEvent signature type."""
    values = parse_dotenv(env_file.read_text()) if env_file.exists() else {}
    values["FUNCTION_SIGNATURE_TYPE"] = "cloudevent"
    return values


def main(argv: Sequence[str]) -> int:
    """Entry point; see the module docstring."""
    if argv[:1] == ["manifest"] and len(argv) <= 2:
        text = yaml.safe_dump(with_retries(sdk_manifest()), sort_keys=False)
        if len(argv) == 2:
            Path(argv[1]).write_text(text)
        else:
            sys.stdout.write(text)
        return 0
    if argv[:1] == ["env-yaml"] and len(argv) == 3:
        out = Path(argv[2])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(yaml.safe_dump(gcloud_env(Path(argv[1]))))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
