"""What a soak run saw and what it reports: the driver's counters (`Stats`), the final read of
the emulator and the receiver (`observe`), and the results dictionary (`results`) that
`python -m soak` writes to soak/results.json (its keys: docs/soak.md, "Results")."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from google.cloud import firestore

from dedup import Record, State
from demo.receiver import Receiver
from soak.checks import (
    CHECKS,
    Observed,
    RecordView,
    Violation,
    effects,
    effects_by_function,
    unanswered_posts,
)
from soak.drain import Drain, Ended
from soak.functions import (
    BATCH_COLLECTION,
    COUNT_COLLECTION,
    NOTIFY_PATH,
    POST_ID_HEADER,
    RECEIPT_PATH,
    RECEIPT_STEP,
    STEP_COUNT_COLLECTION,
    STEP_POST_PATH,
)
from soak.settings import SoakSettings
from soak.worker import POSTS_FILE, SKIPPED_FILE, UNANSWERED_FILE


@dataclass
class Stats:
    """What the driver counts while it delivers."""

    deliveries: int = 0
    refused: int = 0
    dropped: int = 0
    kills: int = 0
    receiver_faults: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    error_samples: dict[str, list[str]] = field(default_factory=dict)
    restart_outages: list[float] = field(default_factory=list)
    longest_delivery: float = 0.0
    """The longest delivery a worker answered (seconds from the request to the answer)."""
    longest_delivery_of: tuple[str, str, str] = ("", "", "")
    """(event id, function, answer) of that delivery."""
    longest_by_function: dict[str, float] = field(default_factory=dict)

    def answered(self, event_id: str, function: str, answer: str, took: float) -> None:
        """Note how long one answered delivery took (call under the driver's lock)."""
        longest = self.longest_by_function.get(function, 0.0)
        self.longest_by_function[function] = max(longest, took)
        if took > self.longest_delivery:
            self.longest_delivery = took
            self.longest_delivery_of = (event_id, function, answer)


def observe(
    client: firestore.Client,
    receiver: Receiver,
    workdir: Path,
    *,
    events: list[str],
    excused: list[tuple[str, float, float]],
    unacknowledged: list[tuple[str, str, str]],
    worker_exits: list[str],
    settings: SoakSettings,
) -> Observed:
    """Read the effects and the dedup records (straight from the emulator) and the receiver's
    log, with what the driver saw, into an `Observed` for `soak.checks.check`."""

    def counters(collection: str) -> dict[str, int]:
        return {
            str(d.get("event")): int(d.get("n")) for d in client.collection(collection).stream()
        }

    records: list[RecordView] = []
    for snapshot in client.collection("triggerEvents").stream():
        record = Record.from_snapshot(snapshot)
        assert record is not None
        records.append(
            RecordView(
                key=record.key,
                event_id=record.event_id,
                suffix=record.suffix,
                state=record.state.value,
                attempts=record.attempts,
                lease_expired=record.state is State.IN_PROGRESS
                and record.has_lease
                and not record.lease_live(snapshot.read_time),
                retried_seconds=_retried_seconds(record),
                steps={
                    name: str(entry.get("state")) for name, entry in (record.steps or {}).items()
                },
            )
        )
    applied = [
        (a.idempotency_key or "", a.body.decode(), a.arrived) for a in receiver.applied(NOTIFY_PATH)
    ]
    unanswered_ids = unanswered_posts(
        (workdir / POSTS_FILE).read_text(), (workdir / UNANSWERED_FILE).read_text()
    )
    unanswered = [
        (a.body.decode(), a.arrived)
        for a in receiver.applied(NOTIFY_PATH)
        if _header(a.headers, POST_ID_HEADER) in unanswered_ids
    ]
    return Observed(
        events=list(events),
        counts=counters(COUNT_COLLECTION),
        batches=counters(BATCH_COLLECTION),
        notify_applied=applied,
        step_counts=counters(STEP_COUNT_COLLECTION),
        step_posts=[
            (a.idempotency_key or "", a.body.decode()) for a in receiver.applied(STEP_POST_PATH)
        ],
        receipts=[a.body.decode() for a in receiver.applied(RECEIPT_PATH)],
        records=records,
        excused=list(excused),
        unanswered=unanswered,
        unacknowledged=list(unacknowledged),
        worker_exits=list(worker_exits),
        skipped=set((workdir / SKIPPED_FILE).read_text().split()),
        max_attempts=settings.max_attempts,
        copies=settings.copies,
    )


def results(
    seen: Observed,
    violations: list[Violation],
    *,
    stats: Stats,
    settings: SoakSettings,
    restarts: int,
    receiver: Receiver,
    faults_log: str,
    drain: Drain,
    drain_ended: tuple[Ended, float],
    driver_stalls: list[float],
    wall: float,
) -> dict[str, object]:
    """The results dictionary (docs/soak.md, "Results")."""
    injected = Counter(line for line in faults_log.splitlines() if line.strip())
    receiver_attempts = receiver.attempts_to(NOTIFY_PATH)
    by_check = Counter(v.check for v in violations)
    why, drain_s = drain_ended
    event_id, function, answer = stats.longest_delivery_of
    return {
        "events": len(seen.events),
        "deliveries": stats.deliveries,
        "kills": stats.kills,
        "restarts": restarts,
        "injected_faults": sum(injected.values()) + stats.receiver_faults,
        "effects": effects(seen),
        "violations": len(violations),
        "violation_examples": _examples(violations),
        "wall_s": round(wall, 1),
        "drain_s": round(drain_s, 1),
        "deaths_in_drain": drain.deaths,
        "longest_delivery_s": round(stats.longest_delivery, 2),
        "function_timeout_s": settings.function_timeout_seconds,
        "details": {
            "settings": asdict(settings),
            "violations_by_check": dict(by_check),
            "checks": {name: by_check[name] for name in CHECKS},
            "effects_by_function": effects_by_function(seen),
            "steps": _steps(seen),
            "injected_by_kind": {**dict(injected), "receiver": stats.receiver_faults},
            "outcomes": dict(stats.outcomes),
            "error_samples": stats.error_samples,
            "refused_connections": stats.refused,
            "record_states": dict(Counter(r.state for r in seen.records)),
            "receiver_attempts": len(receiver_attempts),
            "receiver_applied": len(seen.notify_applied),
            "receiver_applied_unanswered": len(seen.unanswered),
            "receiver_distinct_keys": len({k for k, _, _ in seen.notify_applied}),
            "restart_outage_s": [round(x, 1) for x in stats.restart_outages],
            "drain_ended": why.value,
            "driver_stalls_s": [round(x, 1) for x in driver_stalls],
            "longest_delivery_of": {"event": event_id, "function": function, "answer": answer},
            "longest_delivery_by_function_s": {
                name: round(took, 2) for name, took in stats.longest_by_function.items()
            },
        },
    }


def _steps(seen: Observed) -> dict[str, int]:
    """What the `steps` function did, beside its checks: POSTs of its keyed step (repeats
    included) and its at-most-once step's receipts applied, events whose handler skipped it,
    and records that end with it interrupted (started, never done), with or without a receipt
    applied."""
    receipts = set(seen.receipts)
    interrupted = {
        r.event_id
        for r in seen.records
        if r.suffix == "steps" and r.steps.get(RECEIPT_STEP) == "started"
    }
    return {
        "post_applied": len(seen.step_posts),
        "post_keys": len({key for key, _ in seen.step_posts}),
        "receipts_applied": len(seen.receipts),
        "receipts_skipped": len(seen.skipped),
        "receipts_interrupted": len(interrupted),
        "receipts_interrupted_after_effect": len(interrupted & receipts),
    }


def _retried_seconds(record: Record) -> float:
    """From a record's first attempt to its last (0 when either is missing)."""
    first, last = record.first_attempt_at, record.last_attempt_at
    return (last - first).total_seconds() if first and last else 0.0


def _examples(violations: list[Violation], per_check: int = 5) -> list[str]:
    """Up to `per_check` examples of each broken invariant."""
    shown: Counter[str] = Counter()
    examples = []
    for v in violations:
        if shown[v.check] < per_check:
            shown[v.check] += 1
            examples.append(v.example())
    return examples


def _header(headers: dict[str, str], name: str) -> str | None:
    """A request header by name, whatever its case."""
    return next((v for k, v in headers.items() if k.lower() == name.lower()), None)
