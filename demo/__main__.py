"""`python -m demo`: play the story, print one row per function, exit 1 if any row is off."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from demo.story import play

LOG_DIR = Path(".cache/demo-logs")


COLUMNS = ("function", "events", "deliveries", "retried", "effects", "expected", "")
"""The table's columns; what each row counted is listed below the table (it stays readable in
100 columns)."""


def table_width() -> int:
    """The terminal's width; 100 columns when the output is not a terminal (and COLUMNS is
    not set)."""
    probe = Console()
    return probe.width if probe.is_terminal or "COLUMNS" in os.environ else 100


def main() -> int:
    """Run the demo; 0 when every function's effects match exactly-once, else 1."""
    console = Console(width=table_width())
    console.print(
        "Each event or request: 4 copies at once, every failed copy retried, on the emulators…"
    )
    rows = play(LOG_DIR)
    table = Table(title="Exactly-once effects under at-least-once delivery")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column == "function" else "right", no_wrap=True)
    for row in rows:
        mark = "[green]ok[/]" if row.ok else "[red]MISMATCH[/]"
        numbers = (row.events, row.deliveries, row.failed_deliveries, row.effects, row.expected)
        table.add_row(row.function, *map(str, numbers), mark)
    console.print(table)
    counted = Table.grid(padding=(0, 1, 0, 2))
    counted.add_column(no_wrap=True)
    counted.add_column()
    for row in rows:
        counted.add_row(row.function, row.detail)
    console.print("What each row counted:", counted)
    console.print(
        "retried: deliveries answered with an error (LeaseHeld while another copy ran, a released"
        " lease, a 409 while the first request ran) and delivered again, as the platform or a"
        " client does; an alert published again when no chat message came; and the refusals the"
        " story asks for (422, 401, 400).",
        highlight=False,
    )
    console.print(f"Function logs: {LOG_DIR}/")
    if all(row.ok for row in rows):
        console.print("[green]Every effect happened exactly once.[/]")
        return 0
    console.print("[red]Some effects did not happen exactly once: see the rows marked MISMATCH.[/]")
    return 1


if __name__ == "__main__":
    sys.exit(main())
