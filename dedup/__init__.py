"""Exactly-once effects for Cloud Functions triggers, with Firestore dedup records.

Platforms deliver events at least once. Wrap a handler with `trigger_once(suffix)` (or call
`Deduplicator.run` explicitly) and its effect happens once: duplicates are skipped, a run that
failed is retried, a run whose process died is retried with the same `Delivery.key` so that a
downstream receiver can drop the copy. `async def` handlers get the same through
`AsyncDeduplicator` (`dedup.aio`). See `dedup.kernel.record` for the record schema and
`dedup.config` for settings.

`import dedup` loads the synchronous library and what `trigger_once` needs to read any event:
every trigger kind (`dedup.kinds`), with firebase-functions and cloudevents. The async names
below are imported from `dedup.aio` on first access, and `dedup.http`, `dedup.tasks`,
`dedup.outbox`, the OpenTelemetry SDK and the CLI only when their modules are imported, so an
instance's cold start does not pay for those unless its function uses them.
"""

from typing import TYPE_CHECKING, Any

from dedup.config import DedupConfig
from dedup.entrances.triggers import SuffixRegistry, trigger_once
from dedup.errors import (
    BudgetSpent,
    ConfigError,
    DatabaseMismatch,
    DedupError,
    DuplicateSuffix,
    GivenUp,
    InvalidSuffix,
    KeyCollision,
    LeaseHeld,
    LeaseLost,
    MissingEventId,
    PayloadMismatch,
    RecordRefused,
    StepInterrupted,
    StepMismatch,
    StepTooLarge,
    StoreUnavailable,
    TerminalError,
)
from dedup.kernel.delivery import (
    Delivery,
    Outcome,
    OutcomeKind,
    Step,
    TransactionDelivery,
    WriteOnlyDelivery,
)
from dedup.kernel.front_door import Deduplicator
from dedup.kernel.record import Mode, Record, State
from dedup.kernel.transitions import dedup_key

if TYPE_CHECKING:
    from dedup.aio import (
        AsyncDeduplicator,
        AsyncDelivery,
        AsyncTransactionDelivery,
        AsyncWriteOnlyDelivery,
    )

_ASYNC_NAMES = frozenset(
    {"AsyncDeduplicator", "AsyncDelivery", "AsyncTransactionDelivery", "AsyncWriteOnlyDelivery"}
)
"""Names of `dedup.aio` served by `dedup` itself, imported on first access."""


def __getattr__(name: str) -> Any:
    """The async names, imported from `dedup.aio` (and kept) on first access (PEP 562)."""
    if name in _ASYNC_NAMES:
        import dedup.aio

        value = getattr(dedup.aio, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names, the ones not yet imported included."""
    return sorted({*globals(), *_ASYNC_NAMES})


__all__ = [
    "AsyncDeduplicator",
    "AsyncDelivery",
    "AsyncTransactionDelivery",
    "AsyncWriteOnlyDelivery",
    "BudgetSpent",
    "ConfigError",
    "DatabaseMismatch",
    "DedupConfig",
    "DedupError",
    "Deduplicator",
    "Delivery",
    "DuplicateSuffix",
    "GivenUp",
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
    "RecordRefused",
    "State",
    "Step",
    "StepInterrupted",
    "StepMismatch",
    "StepTooLarge",
    "StoreUnavailable",
    "SuffixRegistry",
    "TerminalError",
    "TransactionDelivery",
    "WriteOnlyDelivery",
    "dedup_key",
    "trigger_once",
]
