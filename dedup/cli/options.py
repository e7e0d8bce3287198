"""The click parameter types and the options that several commands share."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import click

from dedup.cli.durations import parse_duration
from dedup.errors import InvalidSuffix
from dedup.keys import validate_suffix


class DurationType(click.ParamType[timedelta, Any]):
    """A click parameter holding a duration such as `10m`, converted to a timedelta."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> timedelta:
        """Parse `value`, or fail with the accepted form."""
        if isinstance(value, timedelta):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class SuffixType(click.ParamType[str, Any]):
    """A click parameter holding a function suffix, validated like `trigger_once` does."""

    name = "suffix"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """Return the suffix, or fail with the naming rule."""
        try:
            return validate_suffix(str(value))
        except InvalidSuffix as exc:
            self.fail(str(exc), param, ctx)


DURATION = DurationType()
SUFFIX = SuffixType()


def json_option[F: Callable[..., Any]](command: F) -> F:
    """`--json` (as `as_json`): print JSON for scripts."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(command)


def yes_option[F: Callable[..., Any]](command: F) -> F:
    """`--yes`/`-y`: do not ask for confirmation."""
    return click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")(command)
