"""The guard of every command that deletes records: never inside the redelivery window."""

from __future__ import annotations

from datetime import timedelta

import click

from dedup.cli.durations import format_exact
from dedup.platform import LONGEST_REDELIVERY_WINDOW


def require_outside_window(older_than: timedelta, *, force: bool, option: str) -> None:
    """Refuse (usage error, exit status 2) an age cut-off shorter than the redelivery window.

    Called before anything is read or deleted. `force` lets the operator delete anyway.
    """
    window = LONGEST_REDELIVERY_WINDOW
    if force or older_than >= window.span:
        return
    raise click.UsageError(
        f"{option} {format_exact(older_than)} is shorter than the longest redelivery window "
        f"of this collection's triggers, {window.describe()}: a redelivery inside it that finds "
        f"no record runs the handler again. Use {option} {format_exact(window.span)} or "
        "more, or --force to delete anyway."
    )
