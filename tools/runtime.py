"""The functions' deploy runtime (`python313`...): the one place that decides it, from the venv.

`make install` builds `venv/` with the interpreter `tools/find-python.sh` chooses (PYTHON=,
else 3.13, 3.14, 3.12: the `versions` line there is the list of supported versions), then
writes the venv's runtime into `firebase.json` (`sync_firebase_json`), which the Firebase CLI
reads both to deploy and to run the Functions emulator (it runs `venv/bin/python3.X` of the
runtime's version, so a 3.13 venv under `python312` would not start). Every deploy path asks
`runtime_of_venv()`: `gcloud functions deploy --runtime`, the Firebase path's check before
`firebase deploy`, and the base image of any other path; it refuses a venv of an unsupported
version and a `firebase.json` that says another runtime, naming both.

    venv/bin/python -m tools.runtime              # print the runtime, e.g. python313
    venv/bin/python -m tools.runtime check R      # exit 2 unless the runtime is R (make -n shows R)
    venv/bin/python -m tools.runtime sync         # write the venv's runtime into firebase.json
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FINDER = ROOT / "tools" / "find-python.sh"
_RUNTIME_FIELD = re.compile(r'("runtime"\s*:\s*")([^"]*)(")')


class RuntimeMismatch(Exception):
    """The venv cannot say which runtime to deploy to (none, or of an unsupported version), or
    firebase.json says another runtime than the venv's: nothing may deploy. The message names
    both and the command that fixes it."""


def supported_versions(finder: Path = FINDER) -> tuple[str, ...]:
    """The supported Python versions ("3.13", ...), in the order `make install` looks for them:
    the `versions=` line of tools/find-python.sh."""
    match = re.search(r'^versions="([^"]+)"$', finder.read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeMismatch(f"{finder} has no versions= line")
    return tuple(match.group(1).split())


def runtime_name(version: str) -> str:
    """The Cloud Functions / Cloud Run runtime id of a Python version: "3.13" -> "python313"."""
    major, minor = version.split(".")[:2]
    return f"python{major}{minor}"


def version_of_runtime(runtime: str) -> str:
    """The Python version of a runtime id: "python312" -> "3.12" (unchanged if not pythonNNN)."""
    digits = runtime.removeprefix("python")
    return f"{digits[0]}.{digits[1:]}" if digits.isdigit() and len(digits) > 1 else runtime


def venv_version(venv: Path) -> str:
    """The major.minor version ("3.13") the venv was built with, from its pyvenv.cfg."""
    config = venv / "pyvenv.cfg"
    if not config.is_file():
        raise RuntimeMismatch(f"no venv at {venv} to take the runtime from: run make install")
    settings = {}
    for line in config.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            settings[key.strip()] = value.strip()
    found = settings.get("version") or settings.get("version_info") or ""
    if not re.match(r"\d+\.\d+", found):
        raise RuntimeMismatch(f"{config} names no Python version: run make install")
    return ".".join(found.split(".")[:2])


def firebase_json_runtimes(path: Path) -> list[str]:
    """The `runtime` of each codebase of `functions` in firebase.json (empty when absent)."""
    if not path.is_file():
        return []
    functions = json.loads(path.read_text()).get("functions") or []
    if isinstance(functions, dict):
        functions = [functions]
    return [str(codebase.get("runtime", "")) for codebase in functions]


def runtime_of_venv(source: Path = ROOT) -> str:
    """The runtime every deploy path deploys to ("python313"), from the Python version of
    `source`/venv. `RuntimeMismatch` when that version is not supported, or when
    `source`/firebase.json gives a codebase another runtime (named with the venv's), so a
    mismatch is refused before anything deploys."""
    venv = source / "venv"
    version = venv_version(venv)
    supported = supported_versions()
    if version not in supported:
        raise RuntimeMismatch(
            f"the venv is Python {version}, which no supported runtime matches (supported: "
            f"{', '.join(supported)}): run make install (PYTHON=/path/to/python3.13 to choose)"
        )
    runtime = runtime_name(version)
    for found in firebase_json_runtimes(source / "firebase.json"):
        if found != runtime:
            raise RuntimeMismatch(
                f"firebase.json says runtime {found!r}, and the venv is Python {version} "
                f"({runtime}): nothing deployed. Run make install to write {runtime} into "
                f"firebase.json, or build the venv of {found} with "
                f"PYTHON=/path/to/python{version_of_runtime(found)} make install"
            )
    return runtime


def sync_firebase_json(source: Path = ROOT) -> str | None:
    """Write the venv's runtime into every `runtime` of `source`/firebase.json, changing nothing
    else in the file; a line saying what changed, or None when it already said so."""
    path = source / "firebase.json"
    version = venv_version(source / "venv")
    runtime = runtime_name(version)
    if not path.is_file() or set(firebase_json_runtimes(path)) <= {runtime}:
        return None
    before = firebase_json_runtimes(path)
    path.write_text(_RUNTIME_FIELD.sub(rf"\g<1>{runtime}\g<3>", path.read_text()))
    if set(firebase_json_runtimes(path)) != {runtime}:
        raise RuntimeMismatch(f"could not write runtime {runtime} into {path}: edit it by hand")
    return (
        f"firebase.json: runtime {', '.join(sorted(set(before)))} -> {runtime} "
        f"(the venv's Python {version})"
    )


def main(argv: Sequence[str]) -> int:
    """Entry point; see the module docstring. Errors are one line on stderr, exit status 2."""
    try:
        if not argv:
            print(runtime_of_venv())
        elif argv[0] == "sync" and len(argv) == 1:
            changed = sync_firebase_json()
            if changed:
                print(changed)
        elif argv[0] == "check" and len(argv) == 2:
            runtime = runtime_of_venv()
            if runtime != argv[1]:
                raise RuntimeMismatch(
                    f"the plan was made for runtime {argv[1]}, and the venv is now {runtime}: "
                    "run the deploy again"
                )
            print(f"runtime {runtime}: the venv's, as firebase.json says")
        else:
            print("usage: python -m tools.runtime [sync | check RUNTIME]", file=sys.stderr)
            return 2
    except RuntimeMismatch as problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
