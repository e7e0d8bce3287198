"""The seam between the flows and the outside world, at its former import path: see
`dedup.kernel.flow_io`, which this module re-exports."""

from dedup.kernel.flow_io import (
    Ambiguity,
    EventFacts,
    FencedLease,
    Fill,
    FlowIO,
    Invoke,
    Pacing,
    RecordIO,
    Records,
    SyncFill,
)

__all__ = [
    "Ambiguity",
    "EventFacts",
    "FencedLease",
    "Fill",
    "FlowIO",
    "Invoke",
    "Pacing",
    "RecordIO",
    "Records",
    "SyncFill",
]
