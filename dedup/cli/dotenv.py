r"""`.env` files read exactly as the Firebase CLI reads them: for `dedup manifest` (the settings a
deploy would start with) and the template's gcloud deploy path.

`firebase deploy` loads `.env` and then `.env.<project>` (the later file wins) with its own
dotenv parser (firebase-tools `lib/functions/env.js`, `parse` and `parseStrict`); the Functions
emulator adds `.env.local` last. This module is a line-by-line port of that parser, so
`dedup manifest` checks the values the functions will see, and the template's
`make deploy-gcloud` gives the functions the same values `make deploy-firebase` does. What it
means for a line such as `KEY=value`:

| line                      | value                   | why                                     |
|---------------------------|-------------------------|-----------------------------------------|
| `A=x # note`              | `x`                     | an unquoted value ends at `#`           |
| `A="x # note"`            | `x # note`              | quotes keep `#`                         |
| `A="a\nb"`                | `a`, newline, `b`       | `"` reads `\n \r \t \v \\ \' \"`          |
| `A='a\nb'`                | `a\nb` (4 characters)   | single quotes keep backslashes          |
| `export A=x`              | `x`                     | `export` is allowed and dropped         |
| `A="two` / `lines"`       | `two`, newline, `lines` | quoted values may span lines            |
| `not a pair`              | error                   | Firebase refuses the whole file         |
| `lower=x`, `FIREBASE_X=x` | error                   | key rules (`key_problem`)               |

The tests compare this port with the installed firebase-tools on a table of cases.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

_LINE = re.compile(
    r"^\s*(?:export)?\s*([A-Za-z0-9_./]+)\s*=[\f\t\v]*"
    r"(\s*'(?:\\'|[^'])*'|\s*\"(?:\\\"|[^\"])*\"|[^#\r\n]*)?"
    r"\s*(?:#[^\n]*)?$",
    re.MULTILINE | re.DOTALL,
)
_QUOTED = re.compile(r"^([\"'])(.*)\1$", re.MULTILINE | re.DOTALL)
_ESCAPES = {
    "\\n": "\n", "\\r": "\r", "\\t": "\t", "\\v": "\v", "\\\\": "\\", "\\'": "'", '\\"': '"'
}  # fmt: skip
_ESCAPE = re.compile(r"\\[nrtv\\'\"]")
_JS_WHITESPACE = " \t\n\v\f\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
_JS_WHITESPACE += "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"

RESERVED_PREFIXES = ("X_GOOGLE_", "FIREBASE_", "EXT_", "KIT_")
RESERVED_PREFIX_ALLOWLIST = ("FIREBASE_SECRET_REF_", "EXT_MIGRATED_SYSTEM_", "EXT_SELECTED_EVENTS")
RESERVED_KEYS = frozenset(
    {
        "FIREBASE_CONFIG",
        "CLOUD_RUNTIME_CONFIG",
        "EVENTARC_CLOUD_EVENT_SOURCE",
        "ENTRY_POINT",
        "GCP_PROJECT",
        "GCLOUD_PROJECT",
        "GOOGLE_CLOUD_PROJECT",
        "FUNCTION_TRIGGER_TYPE",
        "FUNCTION_NAME",
        "FUNCTION_MEMORY_MB",
        "FUNCTION_TIMEOUT_SEC",
        "FUNCTION_IDENTITY",
        "FUNCTION_REGION",
        "FUNCTION_TARGET",
        "FUNCTION_SIGNATURE_TYPE",
        "K_SERVICE",
        "K_REVISION",
        "PORT",
        "K_CONFIGURATION",
    }
)
"""Keys the Firebase CLI refuses in env files (the platform or the CLI sets them)."""


class EnvFileError(Exception):
    """An env file Firebase would refuse; the message names the file, the line or the key."""


def parse(text: str) -> tuple[dict[str, str], list[str]]:
    """(values, lines that are not KEY=VALUE) of a dotenv text, as firebase-tools' `parse`."""
    text = re.sub(r"\r\n?", "\n", text, count=1)  # sic: firebase-tools replaces the first only
    values: dict[str, str] = {}
    for match in _LINE.finditer(text):
        key, value = match.group(1), (match.group(2) or "").strip(_JS_WHITESPACE)
        quoted = _QUOTED.search(value)  # JS `exec`: anywhere
        if quoted:
            value = quoted.group(2)
            if quoted.group(1) == '"':
                value = _ESCAPE.sub(lambda m: _ESCAPES[m.group(0)], value)
        values[key] = value
    errors = []
    for line in re.split(r"[\r\n]+", _LINE.sub("", text)):
        line = line.strip(_JS_WHITESPACE)
        if line and not line.startswith("#"):
            errors.append(line)
    return values, errors


def key_problem(key: str) -> str | None:
    """Why Firebase refuses `key` as an environment variable name, or None."""
    if key in RESERVED_KEYS:
        return f"Key {key} is reserved for internal use."
    if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", key):
        return (
            f"Key {key} must start with an uppercase ASCII letter or underscore, and then "
            "consist of uppercase ASCII letters, digits, and underscores."
        )
    if not key.startswith(RESERVED_PREFIXES):
        return None
    for allowed in RESERVED_PREFIX_ALLOWLIST:
        if key.startswith(allowed):
            if allowed.endswith("_") and key == allowed:
                return f"Key {key} is a known prefix that requires a suffix"
            if not allowed.endswith("_") and key != allowed:
                return f"Key {key} conflicts with known key {allowed} that does not permit a suffix"
            return None
    return f"Key {key} starts with a reserved prefix ({' '.join(RESERVED_PREFIXES)})"


def parse_strict(text: str, name: str = "the env file") -> dict[str, str]:
    """The values of a dotenv text; `EnvFileError` where firebase-tools' `parseStrict` fails."""
    values, errors = parse(text)
    if errors:
        raise EnvFileError(
            f"{name} is not a valid dotenv file (Firebase refuses it), error on lines: "
            f"{','.join(errors)}. Write KEY=VALUE lines; quote values that contain # or spaces."
        )
    problems = [p for p in map(key_problem, values) if p]
    if problems:
        raise EnvFileError(f"{name}: " + " ".join(problems))
    return values


def project_env_files(folder: Path, project: str) -> list[Path]:
    """The files `firebase deploy --project PROJECT` loads, in order: `.env`, `.env.<project>`."""
    return [p for p in (folder / ".env", folder / f".env.{project}") if p.is_file()]


def emulator_env_files(folder: Path, project: str | None) -> list[Path]:
    """The files the Functions emulator loads, in order: `.env`, `.env.<project>`, `.env.local`."""
    named = [folder / ".env"] + ([folder / f".env.{project}"] if project else [])
    return [p for p in (*named, folder / ".env.local") if p.is_file()]


def load(files: Iterable[Path]) -> Mapping[str, str]:
    """The variables of `files`, later files overriding earlier ones, as Firebase merges them."""
    values: dict[str, str] = {}
    for path in files:
        values.update(parse_strict(path.read_text(encoding="utf-8"), path.name))
    return values
