"""`.env` files read exactly as the Firebase CLI reads them: the library's port
(`dedup.cli.dotenv`), under the name the template's tools and tests import."""

from dedup.cli.dotenv import (
    RESERVED_KEYS,
    RESERVED_PREFIX_ALLOWLIST,
    RESERVED_PREFIXES,
    EnvFileError,
    emulator_env_files,
    key_problem,
    load,
    parse,
    parse_strict,
    project_env_files,
)

__all__ = [
    "RESERVED_KEYS",
    "RESERVED_PREFIXES",
    "RESERVED_PREFIX_ALLOWLIST",
    "EnvFileError",
    "emulator_env_files",
    "key_problem",
    "load",
    "parse",
    "parse_strict",
    "project_env_files",
]
