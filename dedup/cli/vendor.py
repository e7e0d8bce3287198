"""`dedup vendor SOURCE_DIR`: put the installed library into a functions source folder, so that
`firebase deploy` and `gcloud functions deploy` upload it with the functions.

Both CLIs upload the source folder and let Cloud Build `pip install -r requirements.txt` there.
A local path or a wheel file outside that folder in `requirements.txt` does not build (Cloud Build
sees only the upload), and `dedup` is not on PyPI under that name. So the command copies the
`dedup` package the command itself runs from into `SOURCE_DIR/dedup/` (a `VENDORED` file inside
names the version), and adds to `SOURCE_DIR/requirements.txt` each runtime requirement of the
library that the file does not name yet (google-cloud-firestore, firebase-functions, cloudevents,
opentelemetry-api), with the lower bounds the library was tested with. `main.py` then imports
`dedup` from the folder, on the platform as in the emulator.

Run it again after upgrading the library: it replaces its own copy (never a `dedup/` folder it
did not write). `--check` writes nothing and exits 1 when the copy is missing, stale or a
requirement is missing, for a CI to refuse a deploy. It also refuses the requirements.txt lines
Cloud Build could not install with the library (`requirement_conflicts`): a requirement of one
of the library's packages that admits no version the library accepts (such as a pin below its
lower bound), a line naming the library's own distribution (it is not on the package index: the
vendored copy replaces it), and a local path or file outside the source folder (Cloud Build
sees only the upload).
"""

from __future__ import annotations

import re
import shutil
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import click

from dedup.cli.render import source_and_check

DISTRIBUTION = "exactly-once-functions"
"""The library's distribution name (pyproject.toml)."""

MARK = "VENDORED"
"""The file in a vendored copy naming what was copied."""

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def library_folder() -> Path:
    """The folder of the `dedup` package this command runs from."""
    return Path(__file__).resolve().parents[1]


def library_version() -> str:
    """The installed distribution's version, or "source" for a checkout that is not installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "source"


def runtime_requirements() -> list[str]:
    """The library's runtime requirements (no extras): as the installed distribution declares
    them, else (a checkout that is not installed) as its pyproject.toml lists them."""
    try:
        declared = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        pyproject = library_folder().parent / "pyproject.toml"
        return list(tomllib.loads(pyproject.read_text())["project"]["dependencies"])
    return [line for line in declared if "extra ==" not in line]


def project_name(requirement: str) -> str | None:
    """The normalised project name a requirement line names, or None (comment, option, blank)."""
    line = requirement.split("#", 1)[0].strip()
    if not line or line.startswith("-"):
        return None
    match = _NAME.match(line)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else None


def missing_requirements(requirements_txt: Path) -> list[str]:
    """The runtime requirements `requirements_txt` does not name (by project)."""
    lines = requirements_txt.read_text().splitlines() if requirements_txt.exists() else []
    named = {project_name(line) for line in lines}
    return [line for line in runtime_requirements() if project_name(line) not in named]


def requirement_conflicts(requirements_txt: Path) -> list[str]:
    """The lines of `requirements_txt` Cloud Build could not install with the library, one
    message each naming the line and what to write instead (see the module docstring)."""
    if not requirements_txt.exists():
        return []
    from packaging.requirements import InvalidRequirement, Requirement

    bounds = {project_name(line): Requirement(line) for line in runtime_requirements()}
    problems = []
    for raw in requirements_txt.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        if _is_local(line):
            if not _inside(requirements_txt.parent, line):
                problems.append(
                    f"requirements.txt line {line!r} is a local path outside "
                    f"{requirements_txt.parent}: Cloud Build sees only the uploaded folder; "
                    "remove it (`dedup vendor` copies the library into the folder)"
                )
            continue
        name = project_name(line)
        if name == project_name(DISTRIBUTION):
            problems.append(
                f"requirements.txt line {line!r}: {DISTRIBUTION} is not on the package index, "
                "so Cloud Build cannot install it; remove the line (the vendored dedup/ folder "
                "is the library)"
            )
            continue
        bound = bounds.get(name)
        try:
            wanted = Requirement(line)
        except InvalidRequirement:
            continue
        if bound is not None and not _overlap(wanted, bound):
            problems.append(
                f"requirements.txt line {line!r} admits no version of {bound.name} the library "
                f"accepts ({bound}): pip stops with ResolutionImpossible; change the line to "
                f"{bound}"
            )
    return problems


def _is_local(line: str) -> bool:
    return line.startswith((".", "/", "file:")) or line.endswith((".whl", ".tar.gz", ".zip"))


def _inside(folder: Path, line: str) -> bool:
    path = line.removeprefix("file://").removeprefix("file:").split("[", 1)[0]
    target = (folder / path).resolve()
    return target.is_relative_to(folder.resolve())


def _overlap(wanted: Any, bound: Any) -> bool:
    """Some version satisfies both requirements: probed at the versions either names (the
    index is not asked; a range starts at or ends next to a version its specifiers name)."""
    from packaging.version import InvalidVersion, Version

    probes = set()
    for spec in [*wanted.specifier, *bound.specifier]:
        try:
            version = Version(spec.version.removesuffix(".*"))
        except InvalidVersion:
            continue
        release = list(version.release) + [0] * (3 - len(version.release))
        probes.add(version)
        probes.add(Version(".".join(map(str, [*release[:-1], release[-1] + 1]))))
    if not probes:
        return True
    return any(
        wanted.specifier.contains(v, prereleases=True)
        and bound.specifier.contains(v, prereleases=True)
        for v in probes
    )


def _mark_text() -> str:
    return f"dedup {library_version()}, copied by `dedup vendor`; run it again to update.\n"


def _copy_ignored(directory: str, names: list[str]) -> set[str]:
    return {name for name in names if name == "__pycache__" or name.endswith(".pyc")}


def vendor_problems(source: Path) -> list[str]:
    """What `dedup vendor SOURCE_DIR` would change: one line each (empty: up to date)."""
    copy = source / "dedup"
    problems = []
    if not (copy / MARK).exists():
        problems.append(f"{copy} is not a vendored copy of dedup")
    elif (copy / MARK).read_text() != _mark_text() or _differs(library_folder(), copy):
        problems.append(f"{copy} is not the installed dedup {library_version()}")
    problems += [
        f"requirements.txt lacks {line}"
        for line in missing_requirements(source / "requirements.txt")
    ]
    return problems + requirement_conflicts(source / "requirements.txt")


def _differs(installed: Path, copy: Path) -> bool:
    for path in installed.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        twin = copy / path.relative_to(installed)
        if not twin.exists() or twin.read_bytes() != path.read_bytes():
            return True
    return False


def vendor(source: Path) -> list[str]:
    """Copy the library into `source`/dedup and complete `source`/requirements.txt; what was
    done, one line each. Raises `click.ClickException` before writing anything when
    `source`/dedup exists and is not a vendored copy."""
    copy = source / "dedup"
    if copy.exists() and not (copy / MARK).exists():
        raise click.ClickException(
            f"{copy} exists and was not written by `dedup vendor`: move it away first"
        )
    if copy.resolve() == library_folder():
        raise click.ClickException(f"{copy} is the library itself: vendor into another folder")
    done = []
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(library_folder(), copy, ignore=_copy_ignored)
    (copy / MARK).write_text(_mark_text())
    done.append(f"copied dedup {library_version()} to {copy}")
    requirements = source / "requirements.txt"
    missing = missing_requirements(requirements)
    if missing:
        text = requirements.read_text() if requirements.exists() else ""
        if text and not text.endswith("\n"):
            text += "\n"
        text += "# The vendored dedup library's runtime requirements (`dedup vendor`).\n"
        requirements.write_text(text + "".join(f"{line}\n" for line in missing))
        done += [f"added {line} to {requirements}" for line in missing]
    return done


@click.command(name="vendor")
@source_and_check("if the copy is stale")
def vendor_command(source: Path, check: bool) -> None:
    """Copy this dedup into SOURCE_DIR/dedup and add its requirements to requirements.txt.

    SOURCE_DIR is the functions source folder both deploy CLIs upload (firebase.json's
    `functions.source`, or gcloud's --source); Cloud Build installs its requirements.txt.
    """
    if check:
        problems = vendor_problems(source)
        for line in problems:
            click.echo(line, err=True)
        if problems:
            raise SystemExit(1)
        click.echo(f"{source / 'dedup'} is dedup {library_version()}, requirements complete")
        return
    for line in vendor(source):
        click.echo(line)
