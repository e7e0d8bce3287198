"""`dedup`: the operator's command line for dedup records (`python -m dedup`, or `dedup`).

    dedup show EVENT_ID SUFFIX | KEY [--json]      one record, readable or as JSON
    dedup list [--state S] [--suffix S] [--older-than 10m] [--limit N] [--json]
    dedup release KEY... [--yes]                   hand in-progress leases back
    dedup revive KEY... | --state dead|failed|unknown [--suffix S] [--yes]
    dedup purge --older-than 7d [--dry-run] [--force]  delete old records (no TTL policy)
    dedup stats [--json]                           counts, oldest live lease, stuck records

It talks to the Firestore emulator when FIRESTORE_EMULATOR_HOST is set, else to the project
named by `--project` (or GOOGLE_CLOUD_PROJECT / GCLOUD_PROJECT) through Application Default
Credentials. Records are read with `Record.from_snapshot`; every change is written with a
precondition on the document's update time, so a record that a delivery changed after the
command read it is left alone and reported, never overwritten.

Time is the database's: lease expiry and `--older-than` cut-offs are judged against a read
time of Firestore, never the local clock. Time filters use `firstAttemptAt`, the one
timestamp field of the record with a single-field index (`firestore.indexes.json`).
"""

from __future__ import annotations

from dedup.cli.group import cli

__all__ = ["cli", "main"]


def main() -> None:
    """Console entry point (`dedup = "dedup.cli:main"`)."""
    cli()
