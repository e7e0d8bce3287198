"""The invariants checked after every run, from the ledger, the answers and the final records;
each names the promise of docs/guarantees.md (or docs/steps.md) it stands for.

* `exactly-once`: a transactional effect has no window, it commits once with the marker
  (guarantees.md rows 3, 4 and 17; steps.md, `transactional=True`).
* `one-key`: an outside effect is at most once per key at an idempotent receiver: never two
  keys for one effect, nor two effects under one step's key (guarantees.md, "Outside, keyed",
  row 2; steps.md, plain steps).
* `at-most-once`: under `on_ambiguous="skip"` at most one effect (guarantees.md, "The
  ambiguous delivery", the `skip` row); an `on_interrupted="skip"` step never runs twice
  (steps.md).
* `replay`: a replayed step returns what its own call returned (steps.md, "The mismatch
  rule": a changed handler raises `StepMismatch`).
* `lease-fence`: a delivery that lost its lease calls no further step function (steps.md: it
  "gets `LeaseLost` at its next step and calls nothing more").
* `final-or-leased`: every event ends final, or holds a lease (live or expired) for the
  platform's next retry (guarantees.md, "What happens to a delivery").
* `budget`: every dedup RPC's deadline is cut to what is left of the budget (0.1 s at
  least): the last one ends within the function's timeout, and the handler never starts past
  it (configuration.md, "The time budget of a delivery"; guarantees.md, the budget row, 1b).
* `record-fits`: every record write fits Firestore's document and values ("sent" must always
  fit, `MAX_RESULT_BYTES`; guarantees.md row 18: only the handler's own data is refused).
* `answer`: every answer matches its row of the delivery table (guarantees.md, "What happens
  to a delivery"): `ran` and `reconciled` leave `sent`, `failed` `failed`, `dead` `dead`,
  `ambiguous` `unknown`, a duplicate a final record (`gave_up` as its state).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from dedup import Outcome, OutcomeKind

FLOOR = 0.1 + 1e-6
FINAL = {"sent", "failed", "dead", "unknown"}
GIVEN_UP = {"failed", "dead", "unknown"}
ROWS = {
    "exactly-once": "guarantees.md rows 3, 4, 17; steps.md transactional",
    "one-key": "guarantees.md Outside, keyed; row 2; steps.md plain",
    "at-most-once": "guarantees.md The ambiguous delivery, skip; steps.md on_interrupted",
    "replay": "steps.md The mismatch rule",
    "lease-fence": "steps.md: a delivery that lost its lease calls nothing more",
    "final-or-leased": "guarantees.md What happens to a delivery",
    "budget": "guarantees.md time budget row; row 1b",
    "record-fits": "transitions.MAX_RESULT_BYTES: sent must always fit; row 18",
    "answer": "guarantees.md What happens to a delivery",
    "value-kept": "steps.md: a step's value is the same on every delivery; a refused value "
    "raises RecordRefused after the function ran once",
}
EXPECTED = {
    OutcomeKind.RAN: {"sent"},
    OutcomeKind.RECONCILED: {"sent"},
    OutcomeKind.FAILED: {"failed"},
    OutcomeKind.DEAD: {"dead"},
    OutcomeKind.AMBIGUOUS: {"unknown"},
    OutcomeKind.DUPLICATE: FINAL,
    OutcomeKind.DUPLICATE_CACHED: {"sent"},
}


def check(scenario: Any, world: Any, env: Any, platform: Any) -> list[tuple[str, str, str]]:
    """Every invariant broken by the run, as (name, row, what)."""
    found: list[tuple[str, str, str]] = []

    def fail(name: str, detail: str) -> None:
        found.append((name, ROWS[name], detail))

    docs = world.server.docs
    for event in scenario.events:
        key = f"{event}-fn"
        record: dict[str, Any] | None = (docs.get(f"triggerEvents/{key}") or ({}, 0))[0] or None
        state = record.get("state") if record else None
        effects = [e for e in env.effects if e.event == event]
        _exactly_once(scenario, docs, key, record, state, fail)
        _keyed(scenario, effects, key, record, fail)
        if record is not None and state not in FINAL and record.get("leaseStartedAt") is None:
            last = [a for a in platform.answers if a.task.event == event]
            ended = last and isinstance(last[-1].answer, Outcome)
            pending = platform.count.get(event, 0) >= platform.cap_of(event)
            if ended or not pending:
                fail("final-or-leased", f"{key} ends {state} with no lease, and no retry is coming")
    for what in env.mismatches:
        fail("replay", what)
    refused = Counter(
        (path, reason[:200])
        for path, reason in world.server.refusals
        if path.startswith("triggerEvents/")
    )
    for (path, reason), times in refused.items():
        fail("record-fits", f"Firestore refused {times} write(s) of {path}: {reason}")
    for path, reason in sorted(set(world.unencodable)):
        fail("record-fits", f"the client cannot encode a write of {path}: {reason[:200]}")
    _budget(scenario, world, fail)
    _answers(platform, fail)
    if env.seen or env.refused:
        _values_kept(env, platform, fail)
    return found


def _values_kept(env: Any, platform: Any, fail: Any) -> None:
    """A value of the catalogue is kept (every delivery's handler is handed the same value of
    the same types) or refused once its function ran, and never called again once a delivery
    answered `failed` (a refusal whose failed write did not land is retried as an outage: the
    step was never recorded, its function is called again under its key)."""
    for name, seen in env.seen.items():
        other = next((s for s in seen[1:] if s != seen[0]), None)
        if other is not None:
            fail(
                "value-kept",
                f"step {name} handed the handler {str(seen[0])[:150]}, then {str(other)[:150]}",
            )
    for name, _ in env.refused.items():
        event = name.split("/", 1)[0].rsplit("-", 1)[0]
        ended = [
            a.at
            for a in platform.answers
            if a.task.event == event
            and isinstance(a.answer, Outcome)
            and a.answer.kind is OutcomeKind.FAILED
        ]
        if not ended:
            continue
        when = min(ended)
        later = [
            e for e in env.effects if e.kind == "charge" and e.key == name and e.at > when + 1e-9
        ]
        if later:
            fail(
                "value-kept",
                f"step {name} was refused at {when:.3f}, its function called again by "
                f"{later[0].task} at {later[0].at:.3f}",
            )


def _exactly_once(
    scenario: Any, docs: dict[str, Any], key: str, record: Any, state: Any, fail: Any
) -> None:
    if scenario.mode == "transaction":
        n = (docs.get(f"counters/{key}") or ({"n": 0}, 0))[0].get("n", 0)
        want = 1 if state == "sent" else 0
        if n != want:
            fail(
                "exactly-once",
                f"counters/{key} is {n} with the record {state}: "
                f"the handler's writes committed {n} times",
            )
    if scenario.mode == "write_only":
        n = sum(1 for path in docs if path.startswith(f"effects/{key}-"))
        want = 1 if state == "sent" else 0
        if n != want:
            fail("exactly-once", f"{n} effects/{key}-* documents with the record {state}")
    if "reserve" in scenario.steps:
        n = (docs.get(f"stock/{key}") or ({"n": 0}, 0))[0].get("n", 0)
        recorded = [
            s
            for s, e in ((record or {}).get("steps") or {}).items()
            if "reserve" in s and e.get("state") == "done"
        ]
        if n != len(recorded) and not (n < len(recorded)):
            fail(
                "exactly-once",
                f"stock/{key} moved {n} times, {len(recorded)} reserve steps recorded",
            )
        if n > scenario.steps.count("reserve"):
            fail(
                "exactly-once",
                f"stock/{key} moved {n} times for {scenario.steps.count('reserve')} reserve steps",
            )


def _unrecorded_calls(scenario: Any, effects: list[Any], key: str, record: Any) -> set[Any]:
    """The charges of steps named by their place in a list whose order changed, called but
    never recorded as their own (a crash or a lost lease between the call and its record):
    nothing recorded, no fingerprint to check, so the next delivery calls the step again
    under the same key with whatever item came at that place (steps.md: name a step by what
    it acts on, never by its place; a call not recorded runs again under its key)."""
    if not scenario.reorder:
        return set()
    steps = (record or {}).get("steps") or {}
    recorded = {
        f"{key}/{name}": (entry.get("value") or {}).get("item")
        for name, entry in steps.items()
        if entry.get("state") == "done" and isinstance(entry.get("value"), dict)
    }
    return {e for e in effects if e.kind == "charge" and recorded.get(e.key) != e.identity}


def _keyed(scenario: Any, effects: list[Any], key: str, record: Any, fail: Any) -> None:
    plain = [e for e in effects if e.kind == "effect"]
    unrecorded = _unrecorded_calls(scenario, effects, key, record)
    if any(e.key != key for e in plain):
        fail("one-key", f"effects of {key} under keys {sorted({e.key for e in plain})}")
    if (
        scenario.on_ambiguous == "skip"
        and scenario.reconcile in (None, "unsure")
        and len(plain) > 1
    ):
        who = ", ".join(f"{e.task} at {e.at:.3f}" for e in plain)
        fail("at-most-once", f"on_ambiguous='skip' and {len(plain)} effects of {key}: {who}")
    keys_of: dict[str, set[str]] = defaultdict(set)
    identities_of: dict[str, set[str]] = defaultdict(set)
    for e in effects:
        if e.kind in ("charge",) and e not in unrecorded:
            keys_of[e.identity].add(e.key)
            identities_of[e.key].add(e.identity)
    for identity, keys in keys_of.items():
        if len(keys) > 1:
            fail("one-key", f"one effect ({identity!r}) under {len(keys)} keys: {sorted(keys)}")
    for step_key, identities in identities_of.items():
        if len(identities) > 1:
            fail(
                "one-key",
                f"step key {step_key} carries {len(identities)} effects: {sorted(identities)}",
            )
    receipts = [e for e in effects if e.kind == "receipt"]
    by_key: dict[str, int] = defaultdict(int)
    for e in receipts:
        by_key[e.key] += 1
    for step_key, n in by_key.items():
        if n > 1:
            fail("at-most-once", f"the at-most-once step {step_key} ran {n} times")
    for e in effects:
        if e.kind == "charge" and not e.lease_live:
            fail(
                "lease-fence",
                f"{e.task} called step function {e.key} at {e.at:.3f} without a live lease",
            )


def _budget(scenario: Any, world: Any, fail: Any) -> None:
    for task in world.tasks:
        run = task.run
        if run is None:
            continue
        ends = run.budget.started + scenario.budget
        for sent, what, timeout in task.sends:
            # configuration.md: every dedup RPC's deadline is cut to what is left (0.1 s at
            # least), so the last one ends within the function's timeout; a rollback keeps its
            # own 0.5 s (`ROLLBACK_FLOOR_SECONDS`); the handler's own calls are its business.
            if what.startswith(("rollback", "handler:")):
                continue
            if sent + timeout > max(ends, sent + FLOOR) + 1e-6:
                fail(
                    "budget",
                    f"{task.name} sent {what} at {sent:.3f} with a deadline of {timeout:.3f} s, "
                    f"past its budget's end {ends:.3f} (started {run.budget.started:.3f})",
                )
                break
        if task.handler_at is not None and task.handler_at > ends + 1e-9:
            fail(
                "budget",
                f"{task.name} started the handler at {task.handler_at:.3f}, "
                f"past its budget's end {ends:.3f}",
            )


def _answers(platform: Any, fail: Any) -> None:
    for a in platform.answers:
        if not isinstance(a.answer, Outcome):
            continue
        kind = a.answer.kind
        state = a.record.get("state") if a.record else None
        allowed = EXPECTED.get(kind)
        if allowed is not None and state not in allowed:
            fail("answer", f"{a.task.name} answered {kind.value} with the record {state}")
        if kind is OutcomeKind.RECONCILED and not (a.record or {}).get("reconciled"):
            fail("answer", f"{a.task.name} answered reconciled, the record is not reconciled")
        if (
            kind is OutcomeKind.DUPLICATE
            and a.record is not None
            and a.answer.gave_up != (state in GIVEN_UP)
        ):
            fail(
                "answer",
                f"{a.task.name}: duplicate of a {state} record with gave_up={a.answer.gave_up}",
            )
