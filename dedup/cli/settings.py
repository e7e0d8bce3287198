"""The DEDUP_* settings a functions source folder gives its functions, read from its env files
as the Firebase CLI reads them (`dedup.cli.dotenv`), and checked before a deploy.

`firebase deploy --project P` gives the functions `.env` then `.env.P` (the later file wins);
the Functions emulator adds `.env.local`. `dedup manifest` checks every set of files a deploy
or the emulator could load (each `.env.<name>` file is one project's, with `.env`), so a
misspelled or malformed DEDUP_* variable stops the predeploy with the message
`DedupConfig.from_env` gives at start-up, instead of instances that fail to start.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from dedup.cli.dotenv import EnvFileError, emulator_env_files, load, project_env_files
from dedup.config import DedupConfig
from dedup.errors import ConfigError

__all__ = ["deploy_env", "settings_problems"]

LOCAL = ".env.local"
"""The file only the Functions emulator loads."""


def _projects(source: Path) -> list[str]:
    """The projects that have a `.env.<project>` file in `source`."""
    names = (p.name.removeprefix(".env.") for p in source.glob(".env.*") if p.is_file())
    return sorted(name for name in names if name and name != "local")


def _file_sets(source: Path, project: str | None) -> list[list[Path]]:
    """Every list of env files a deploy or the emulator could load from `source`."""
    sets = [project_env_files(source, name) for name in _projects(source)]
    sets.append([p for p in (source / ".env",) if p.is_file()])
    sets.append(emulator_env_files(source, project))
    unique: list[list[Path]] = []
    for files in sets:
        if files and files not in unique:
            unique.append(files)
    return unique


def settings_problems(source: Path, project: str | None = None) -> list[str]:
    """One line per env file set of `source` that Firebase would refuse, or whose DEDUP_*
    variables `DedupConfig.from_env` refuses (unknown, misspelled, malformed), naming the files
    and the fix; empty when every set is good."""
    problems: list[str] = []
    for files in _file_sets(source, project):
        names = ", ".join(str(p) for p in files)
        try:
            values = load(files)
        except EnvFileError as exc:
            problem = f"{names}: {exc}"
        else:
            try:
                DedupConfig.from_env({k: v for k, v in values.items() if k.startswith("DEDUP_")})
                continue
            except ConfigError as exc:
                problem = f"{names}: {exc}"
        if problem not in problems:
            problems.append(problem)
    return problems


def deploy_env(source: Path, project: str | None) -> Mapping[str, str]:
    """The variables a deploy of `source` to `project` gives the functions from its env files
    (`.env`, then `.env.<project>`; `.env` alone without a project)."""
    if project:
        return load(project_env_files(source, project))
    return load([p for p in (source / ".env",) if p.is_file()])
