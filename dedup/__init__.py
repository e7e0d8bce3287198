"""Exactly-once effects for Cloud Functions triggers, with Firestore dedup records.

Platforms deliver events at least once. Wrap a handler with `trigger_once(suffix)` (or call
`Deduplicator.run` explicitly) and its effect happens once: duplicates are skipped, a run that
failed is retried, a run whose process died is retried with the same `Delivery.key` so that a
downstream receiver can drop the copy. `async def` handlers get the same through
`AsyncDeduplicator` (`dedup.aio`). See `dedup.record` for the record schema and
`dedup.config` for settings.
"""

from dedup.aio import (
    AsyncDeduplicator,
    AsyncDelivery,
    AsyncTransactionDelivery,
    AsyncWriteOnlyDelivery,
)
from dedup.config import DedupConfig
from dedup.core import Deduplicator
from dedup.decorator import SuffixRegistry, trigger_once
from dedup.delivery import (
    Delivery,
    Outcome,
    OutcomeKind,
    Step,
    TransactionDelivery,
    WriteOnlyDelivery,
)
from dedup.errors import (
    ConfigError,
    DatabaseMismatch,
    DedupError,
    DuplicateSuffix,
    InvalidSuffix,
    KeyCollision,
    LeaseHeld,
    LeaseLost,
    MissingEventId,
    PayloadMismatch,
    StoreUnavailable,
    TerminalError,
)
from dedup.keys import dedup_key
from dedup.record import Mode, Record, State

__all__ = [
    "AsyncDeduplicator",
    "AsyncDelivery",
    "AsyncTransactionDelivery",
    "AsyncWriteOnlyDelivery",
    "ConfigError",
    "DatabaseMismatch",
    "DedupConfig",
    "DedupError",
    "Deduplicator",
    "Delivery",
    "DuplicateSuffix",
    "InvalidSuffix",
    "KeyCollision",
    "LeaseHeld",
    "LeaseLost",
    "MissingEventId",
    "Mode",
    "Outcome",
    "OutcomeKind",
    "PayloadMismatch",
    "Record",
    "State",
    "Step",
    "StoreUnavailable",
    "SuffixRegistry",
    "TerminalError",
    "TransactionDelivery",
    "WriteOnlyDelivery",
    "dedup_key",
    "trigger_once",
]
