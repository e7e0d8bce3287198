"""`python -m demo`: play the story, print one row per function, exit 1 if any row is off."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from demo.story import play

LOG_DIR = Path(".cache/demo-logs")


def main() -> int:
    """Run the demo; 0 when every function's effects match exactly-once, else 1."""
    console = Console()
    console.print("Delivering every event 4 times at once, retrying failures, on the emulators…")
    rows = play(LOG_DIR)
    table = Table(title="Exactly-once effects under at-least-once delivery")
    for column in (
        "function",
        "events",
        "deliveries",
        "effects",
        "expected",
        "",
        "what was counted",
    ):
        table.add_column(
            column,
            justify="right"
            if column in {"events", "deliveries", "effects", "expected"}
            else "left",
        )
    for row in rows:
        mark = "[green]ok[/]" if row.ok else "[red]MISMATCH[/]"
        table.add_row(
            row.function,
            str(row.events),
            str(row.deliveries),
            str(row.effects),
            str(row.expected),
            mark,
            row.detail,
        )
    console.print(table)
    console.print(f"Function logs: {LOG_DIR}/")
    if all(row.ok for row in rows):
        console.print("[green]Every effect happened exactly once.[/]")
        return 0
    console.print("[red]Some effects did not happen exactly once: see the rows marked MISMATCH.[/]")
    return 1


if __name__ == "__main__":
    sys.exit(main())
