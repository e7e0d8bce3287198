"""`python -m demo`: play the story, print one row per function, exit 1 if any row is off."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from demo.story import play

LOG_DIR = Path(".cache/demo-logs")


COLUMNS = ("function", "events", "deliveries", "retried", "effects", "expected", "", "counted")


def main() -> int:
    """Run the demo; 0 when every function's effects match exactly-once, else 1."""
    console = Console(width=max(Console().width, 150))
    console.print("Each event: 4 copies at once, every failed copy retried, on the emulators…")
    rows = play(LOG_DIR)
    table = Table(title="Exactly-once effects under at-least-once delivery")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in {"function", "counted"} else "right")
    for row in rows:
        mark = "[green]ok[/]" if row.ok else "[red]MISMATCH[/]"
        numbers = (row.events, row.deliveries, row.failed_deliveries, row.effects, row.expected)
        table.add_row(row.function, *map(str, numbers), mark, row.detail)
    console.print(table)
    console.print(
        "retried: deliveries answered with an error (LeaseHeld while another copy ran, a released"
        " lease) and delivered again, as the platform does with retries on."
    )
    console.print(f"Function logs: {LOG_DIR}/")
    if all(row.ok for row in rows):
        console.print("[green]Every effect happened exactly once.[/]")
        return 0
    console.print("[red]Some effects did not happen exactly once: see the rows marked MISMATCH.[/]")
    return 1


if __name__ == "__main__":
    sys.exit(main())
