"""The final verdict, from the effects themselves: a pure function of what the soak observed.

Each check names an invariant; `check` returns every broken one as a `Violation`:

* `transaction effect`/`write-only effect`: the counter document of every event is exactly 1
  (0 = effect lost, 2+ = effect repeated).
* `keyed effect`: the receiver applied every event's notification under exactly one key, the
  event's `dedup_key(event, "notify")`, and an idempotent receiver keeps exactly one per key.
* `repeated without a crash`: a key reached the receiver (answered 2xx) more than once, and
  fewer than all but one of those POSTs arrived during a delivery of that event whose process
  was killed (or whose connection dropped), which overlapped an emulator restart or which
  outlasted its lease (the documented windows): a repeat caused by something else (a store
  error after the effect), which the design forbids.
* `step transaction effect`: the `steps` function's transactional step moved
  `soakStepCount/<event>` exactly once (n is 1).
* `step keyed effect`: the receiver applied every event's keyed step at least once, under
  exactly one key, `<dedup_key(event, "steps")>/post`: once at an idempotent receiver.
* `at-most-once effect`: the receiver applied no event's at-most-once step twice; and it
  agrees with the record: a step applied was started first (the record holds it), a step
  recorded done was applied, and a `sent` record's delivery reached the step.
* `record of another event`: a record at an event's key was written for another (event, suffix).
* `in_progress past its lease`: a record still leased after its lease expired, at the end.
* `attempts`: no record retried for `min_retry_seconds` counts more than `max_attempts` +
  concurrency attempts (younger ones may: fast redeliveries spend attempts that must not kill
  the event, `dedup.kernel.claims.AttemptLimit`).
* `dead too soon`: no record is dead before both `max_attempts` attempts and
  `min_retry_seconds` between its first and last attempt.
* `not acknowledged`: a delivery chain was still being redelivered when the drain ended.
* `worker exited`: a function process died by anything other than the soak's SIGKILL.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from dedup import dedup_key
from dedup.config import DEFAULT_MIN_RETRY_SECONDS
from dedup.kernel.steps import step_key
from soak.functions import FUNCTIONS, POST_STEP, RECEIPT_STEP

CHECKS = (
    "transaction effect",
    "write-only effect",
    "keyed effect",
    "repeated without a crash",
    "step transaction effect",
    "step keyed effect",
    "at-most-once effect",
    "record of another event",
    "in_progress past its lease",
    "attempts",
    "dead too soon",
    "not acknowledged",
    "worker exited",
)
"""Every check's name (the results count the violations of each, zeros included)."""


@dataclass(frozen=True)
class RecordView:
    """The fields of a dedup record the checks need, read at the end."""

    key: str
    event_id: str
    suffix: str
    state: str
    attempts: int
    lease_expired: bool
    """True when the record holds a lease that expired before the final read time."""
    retried_seconds: float = 0.0
    """From the record's first attempt to its last (database clock)."""
    steps: dict[str, str] = field(default_factory=dict)
    """The state ("done" or "started") of each durable step the record holds, by name."""


@dataclass(frozen=True)
class Violation:
    """One broken invariant, with the event and function concerned."""

    check: str
    event_id: str
    function: str
    detail: str

    def example(self) -> str:
        """One line for `violation_examples`."""
        return f"{self.check}: event {self.event_id!r} {self.function}: {self.detail}"


@dataclass
class Observed:
    """Everything the soak saw, gathered after the drain."""

    events: list[str]
    counts: dict[str, int]
    """soakCount/<event>.n (transaction function)."""
    batches: dict[str, int]
    """soakBatch/<event>.n (write-only function)."""
    notify_applied: list[tuple[str, str, float]]
    """(Idempotency-Key, event id, arrival time) of every /notify POST the receiver answered
    2xx; times are `time.monotonic()` of the driver's process."""
    step_counts: dict[str, int]
    """soakStepCount/<event>.n (the `steps` function's transactional step)."""
    step_posts: list[tuple[str, str]]
    """(Idempotency-Key, event id) of every keyed-step POST the receiver answered 2xx."""
    receipts: list[str]
    """The event id of every at-most-once POST the receiver answered 2xx: one receipt each."""
    records: list[RecordView]
    excused: list[tuple[str, float, float]]
    """(event id, start, end) of notify deliveries that lost their process (or connection),
    overlapped an emulator restart or outlasted the lease: a POST that arrived meanwhile may be
    repeated under the same key, the documented windows."""
    unanswered: list[tuple[str, float]] = field(default_factory=list)
    """(event id, arrival time) of applied notification POSTs whose answer never reached the
    handler that sent them (it saw a timeout or a dropped connection, so its delivery failed
    and a retry sent the same key again): the downstream's documented window."""
    unacknowledged: list[tuple[str, str, str]] = field(default_factory=list)
    """(event id, function, last answer) of copies still redelivered when the drain ended."""
    worker_exits: list[str] = field(default_factory=list)
    """How function processes died other than by the soak's SIGKILL."""
    skipped: set[str] = field(default_factory=set)
    """Events whose `steps` handler found the at-most-once step interrupted and skipped it."""
    max_attempts: int = 10
    min_retry_seconds: float = DEFAULT_MIN_RETRY_SECONDS
    copies: int = 3


def check(seen: Observed) -> list[Violation]:
    """Every invariant broken in `seen`, in a stable order."""
    found: list[Violation] = []
    for event in seen.events:
        for name, table in (("count", seen.counts), ("batch_count", seen.batches)):
            n = table.get(event, 0)
            if n != 1:
                kind = "transaction effect" if name == "count" else "write-only effect"
                what = "lost" if n == 0 else f"applied {n} times"
                found.append(Violation(kind, event, name, f"{what}, expected exactly once"))
    found += _keyed(seen)
    found += _steps(seen)
    expected = {
        dedup_key(event, f.suffix): (event, f.suffix, f.name)
        for event in seen.events
        for f in FUNCTIONS
    }
    owners: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for event in seen.events:
        for f in FUNCTIONS:
            owners[dedup_key(event, f.suffix)].append((event, f.suffix, f.name))
    for key, pairs in owners.items():
        if len(pairs) > 1:
            names = ", ".join(f"({e!r}, {s!r})" for e, s, _ in pairs)
            found.append(
                Violation(
                    "record of another event",
                    pairs[0][0],
                    pairs[0][2],
                    f"{names} share the record {key!r}: one of them finds the other's outcome",
                )
            )
    limit = seen.max_attempts + seen.copies
    for record in seen.records:
        event, suffix, name = expected.get(record.key, (record.event_id, record.suffix, "?"))
        if (record.event_id, record.suffix) != (event, suffix):
            found.append(
                Violation(
                    "record of another event",
                    event,
                    name,
                    f"record {record.key!r} says ({record.event_id!r}, {record.suffix!r})",
                )
            )
        if record.state == "in_progress" and record.lease_expired:
            found.append(
                Violation(
                    "in_progress past its lease",
                    event,
                    name,
                    f"record {record.key!r} (attempt {record.attempts})",
                )
            )
        retried_long = record.retried_seconds >= seen.min_retry_seconds
        if record.state == "dead" and (record.attempts < seen.max_attempts or not retried_long):
            found.append(
                Violation(
                    "dead too soon",
                    event,
                    name,
                    f"record {record.key!r} is dead after {record.attempts} attempts over "
                    f"{record.retried_seconds:.0f} s; dead needs max_attempts "
                    f"{seen.max_attempts} and min_retry_seconds {seen.min_retry_seconds:g}",
                )
            )
        if record.attempts > limit and retried_long:
            found.append(
                Violation(
                    "attempts",
                    event,
                    name,
                    f"record {record.key!r} counts {record.attempts} attempts, above "
                    f"max_attempts {seen.max_attempts} + concurrency {seen.copies}",
                )
            )
    for event, name, last in seen.unacknowledged:
        found.append(Violation("not acknowledged", event, name, f"still redelivered: {last}"))
    for exit_ in seen.worker_exits:
        found.append(Violation("worker exited", "-", "-", exit_))
    return found


def _keyed(seen: Observed) -> list[Violation]:
    found: list[Violation] = []
    keys_by_event: dict[str, set[str]] = defaultdict(set)
    sends = Counter(key for key, _, _ in seen.notify_applied)
    windows: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for event, start, end in seen.excused:
        windows[event].append((start, end))
    unanswered = set(seen.unanswered)
    last: dict[str, float] = {}
    for key, _, arrived in seen.notify_applied:
        last[key] = max(arrived, last.get(key, arrived))
    explained: Counter[str] = Counter()
    for key, event, arrived in seen.notify_applied:
        keys_by_event[event].add(key)
        if arrived < last[key] and (
            (event, arrived) in unanswered
            or any(start <= arrived <= end for start, end in windows[event])
        ):
            explained[key] += 1  # a POST before the last one, in a documented window
    for event in seen.events:
        expected = dedup_key(event, "notify")
        keys = keys_by_event.get(event, set())
        if not keys:
            found.append(Violation("keyed effect", event, "notify", "lost: never applied"))
            continue
        if keys != {expected}:
            found.append(
                Violation(
                    "keyed effect",
                    event,
                    "notify",
                    f"applied under keys {sorted(keys)}, expected only {expected!r}",
                )
            )
        unexplained = sends[expected] - 1 - explained[expected]
        if unexplained > 0:
            found.append(
                Violation(
                    "repeated without a crash",
                    event,
                    "notify",
                    f"key {expected!r} applied {sends[expected]} times, only "
                    f"{explained[expected]} of them during a delivery that was killed, "
                    "overlapped an emulator restart or outlasted its lease",
                )
            )
    return found


def _steps(seen: Observed) -> list[Violation]:
    """The `steps` function's effects: its transactional step once, its keyed step under its
    one key, its at-most-once step never twice and as its record says."""
    found: list[Violation] = []
    keys_by_event: dict[str, set[str]] = defaultdict(set)
    for key, event in seen.step_posts:
        keys_by_event[event].add(key)
    receipts = Counter(seen.receipts)
    records = {r.key: r for r in seen.records}
    for event in seen.events:
        n = seen.step_counts.get(event, 0)
        if n != 1:
            what = "lost" if n == 0 else f"applied {n} times"
            found.append(
                Violation("step transaction effect", event, "steps", f"{what}, expected once")
            )
        key = dedup_key(event, "steps")
        expected = step_key(key, POST_STEP)
        keys = keys_by_event.get(event, set())
        if keys != {expected}:
            what = f"applied under keys {sorted(keys)}" if keys else "lost: never applied"
            found.append(
                Violation("step keyed effect", event, "steps", f"{what}, expected {expected!r}")
            )
        record = records.get(key)
        found += [
            Violation("at-most-once effect", event, "steps", detail)
            for detail in _at_most_once(receipts[event], record)
        ]
    return found


def _at_most_once(applied: int, record: RecordView | None) -> list[str]:
    """What is wrong with an event's at-most-once step, applied `applied` times, given its
    record (None: no record)."""
    state = record.steps.get(RECEIPT_STEP) if record is not None else None
    if applied > 1:
        return [f"applied {applied} times, expected at most once"]
    if applied == 1 and state is None:
        return ["applied, but its record holds no start of the step: called before its start"]
    if applied == 0 and state == "done":
        return ["recorded done, but never applied"]
    if applied == 0 and state is None and record is not None and record.state == "sent":
        return ["the record is sent, but the step was never started"]
    return []


def unanswered_posts(posts_log: str, unanswered_log: str) -> set[str]:
    """The ids of notification POSTs whose answer never reached their handler: those it logged
    as unanswered (a timeout, a dropped connection), and those it logged as sent but neither
    answered nor unanswered, because its process was SIGKILLed first. The receiver may read
    such a POST after the driver saw the process die, so its arrival can fall after the end of
    the killed delivery: the sender's own log is the evidence, not the arrival time."""
    sent: set[str] = set()
    answered: set[str] = set()
    for line in posts_log.splitlines():
        kind, _, post_id = line.partition(" ")
        if kind == "sent":
            sent.add(post_id)
        elif kind == "answered":
            answered.add(post_id)
    return set(unanswered_log.split()) | (sent - answered)


def effects_by_function(seen: Observed) -> dict[str, int]:
    """Effects observed per function (and per step of `steps`): counter increments, distinct
    keys the receiver applied, receipts applied."""
    return {
        "notify": len({key for key, _, _ in seen.notify_applied}),
        "count": sum(seen.counts.values()),
        "batch_count": sum(seen.batches.values()),
        "steps.count": sum(seen.step_counts.values()),
        "steps.post": len({key for key, _ in seen.step_posts}),
        "steps.receipt": len(seen.receipts),
    }


def effects(seen: Observed) -> int:
    """Effects observed: counter increments, the receiver's distinct applied keys and the
    at-most-once receipts it applied (`effects_by_function`, summed)."""
    return sum(effects_by_function(seen).values())
