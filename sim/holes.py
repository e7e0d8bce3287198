"""The holes the simulator knows how to find, each recognised in a run's violations, with the
kernel behaviour it depends on and the family of runs that finds it soonest.

A hole stays here after its fix merges: every search for it (`search`) runs with the fix
taken back (`sim.old_kernel.taken_back`: the fixed kernel's function with that fix taken out,
put in its place), and `tests/sim/test_holes.py` asserts the simulator still finds it. A
simulator that stops finding a known hole fails.

A fixed hole excuses nothing: on the kernel as it is, every violation fails
`tests/sim/test_share.py` and `make simulate`. Only a hole still `open` (its fix not merged
yet) excuses the violations it recognises (`unexplained`), and only until its fix merges.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Hole:
    """One known way to break a promise."""

    name: str
    what: str
    depends_on: str
    """The kernel behaviour the hole needs (what a fix changes)."""
    invariants: tuple[str, ...]
    recognise: Callable[[str], bool]
    """Whether a violation's detail (of one of `invariants`) is this hole."""
    family: dict[str, Any] = field(default_factory=dict)
    """`sim.scenario.make` keywords of the runs that find it soonest."""
    open: bool = False
    """Its fix is not in the kernel yet: the violations it recognises are excused."""
    surface: str = "kernel"
    """The surface whose runs find it (`sim.surfaces`): `kernel` (the kernel's scenario,
    narrowed by `family`), or `http`, `callable`, `operators` (every seed run as one)."""

    def found_in(self, violations: list[tuple[str, str, str]]) -> bool:
        return any(name in self.invariants and self.recognise(d) for name, _, d in violations)


HOLES = [
    Hole(
        "give-back erases ambiguity",
        "an ambiguous take-over that gives the lease back unstarted leaves a released lease; "
        "the next delivery runs the handler again: a second effect under on_ambiguous='skip'",
        "dedup.kernel.lease._give_back_unstarted wrote `released` (leaseStartedAt: null) after "
        "an ambiguous take-over, and dedup.kernel.claims.takeover_ambiguous counts a released "
        "lease as not ambiguous",
        ("at-most-once",),
        lambda d: "on_ambiguous='skip'" in d,
        {"mode": "lease", "program": "plain", "on_ambiguous": "skip"},
    ),
    Hole(
        "result fits JSON, not the document",
        "a handler result under the library's 512 KiB of JSON but over Firestore's 1 MiB "
        "document (170,000 zeros: 8 bytes each to Firestore): 'sent' is refused, retried as an "
        "outage until the lease ends, and the handler reruns",
        "dedup.kernel.room.storable_result measured a result as JSON only (MAX_RESULT_BYTES), "
        "not as Firestore measures the record",
        ("record-fits",),
        lambda d: "maximum entity size" in d,
        {"mode": "lease", "program": "big"},
    ),
    Hole(
        "plain step after the lease",
        "a delivery whose lease ended (a pause, a slow answer) calls its next plain step's "
        "function; only the step's record write finds the lease lost",
        "dedup.kernel.step_writes.require_live did not check the lease's end (Budget.lease_left) "
        "before a plain step's function is called",
        ("lease-fence",),
        lambda d: True,
        {"mode": "lease", "program": "steps"},
    ),
    Hole(
        "replay with other arguments",
        "steps named by their place in a list whose order changed between deliveries: a "
        "replay hands one item's recorded value to another, which is never charged, and the "
        "first is charged again under another key",
        "dedup.kernel.steps._same_call (StepLog.replay) did not compare a recorded step's "
        "fingerprint (its function and arguments) with the call's",
        ("replay", "one-key"),
        lambda d: "@s" in d or "charge" in d,
        {"mode": "lease", "program": "steps"},
    ),
    Hole(
        "step values Firestore cannot keep",
        "a step whose value is a Decimal (the client cannot encode it), nested arrays or a name "
        "Firestore reserves (refused as INVALID_ARGUMENT) fails its record write, which is "
        "retried as an outage and the step runs again; a set comes back from a replay as a list",
        "dedup.kernel.steps.StepLog.with_entry checked a value's JSON size only (no refusal, "
        "no room in the record), and dedup.kernel.steps.check_name allowed `__.*__`",
        ("record-fits", "replay"),
        lambda d: any(
            mark in d
            for mark in ("odd", "__s0__", "cannot encode", "array value in an array", "nested arr")
        ),
        {"mode": "lease", "program": "steps"},
    ),
    Hole(
        "step check read past the budget",
        "after a transactional step's transaction failed, the record is read with the whole "
        "RPC timeout, not what is left of the budget",
        "dedup.kernel.step_writes._transaction_once read the record without `budget=`",
        ("budget",),
        lambda d: " sent get " in d and "(check step " in d,
        {"mode": "lease", "program": "steps"},
    ),
    Hole(
        "stale deadline past the budget",
        "a deadline computed before one RPC is given to the next one (the read after a "
        "conflict, a failed attempt's write after its read): after a slow answer or a pause "
        "it runs past the function's timeout",
        "dedup.kernel.lease.Lease.write, dedup.kernel.lease._claim and "
        "dedup.kernel.atomic._record_failed_attempt reused a round's budget for a second RPC",
        ("budget",),
        lambda d: (
            (" sent get " in d and "(check step " not in d) or "(record a failed attempt on)" in d
        ),
        {},
    ),
    Hole(
        "a step value read back as another type",
        "a step's function returns a value Firestore gives back as another type (a "
        "GeoPoint(35, 139) read as GeoPoint(35.0, 139.0), a timestamp in another zone read "
        "in UTC, an IntEnum as an int): the first run hands the handler one value, every "
        "replay another, and a step that takes it as argument fingerprints differently",
        "dedup.kernel.step_writes.as_replayed (the first run hands the handler the value as "
        "the record gives it back) did not exist: _run_one returned the function's value",
        ("value-kept",),
        lambda d: "handed the handler" in d or "fingerprint differs" in d,
        {"mode": "lease", "program": "steps"},
    ),
    Hole(
        "an error text Firestore cannot store",
        "a handler raises with a message holding a lone surrogate: its release, failed or "
        "dead write carries it in lastError and Firestore refuses the write, so the record "
        "never says how the attempt ended",
        "dedup.kernel.record.error_text did not make the text storable (storable_text)",
        ("record-fits",),
        lambda d: "lastError" in d,
        {},
    ),
    Hole(
        "callable details json.dumps cannot encode",
        "a callable raises an HttpsError below 500 whose details hold a Decimal (a set, "
        "bytes): storing it with json.dumps raises after the effect, the key is released and "
        "the handler runs again: a second effect under on_ambiguous='skip'",
        "dedup.http.callable._error_json stored the details with json.dumps, not as "
        "firebase-functions sends them (sent_json)",
        ("at-most-once",),
        lambda d: "on_ambiguous='skip'" in d,
        {},
        surface="callable",
    ),
    Hole(
        "a slow reconcile starts the handler after the lease",
        "reconcile takes longer than the lease or the budget (a slow search): the delivery "
        "starts the handler afterwards, past its budget, while another may hold the lease",
        "dedup.kernel.lease._run_owned did not look at the lease's end and the budget after "
        "reconcile (Budget.lease_late, Budget.left) before starting the handler",
        ("budget", "lease-fence"),
        lambda d: "started the handler at" in d or "without a live lease" in d,
        {"mode": "lease"},
    ),
    Hole(
        "a waiting HTTP copy with a fresh budget",
        "a request that waits for the first one with its key (wait_seconds) starts each "
        "round's delivery with the function's whole budget: a round begun late runs past "
        "the request's timeout",
        "dedup.http.replay.settle gave each wait round's delivery the whole budget, not what "
        "is left of the request's (TimeBudget(left))",
        ("in-time",),
        lambda d: True,
        {},
        surface="http",
    ),
    Hole(
        "revive of a dead record whose effect happened",
        "a delivery crashes after its effect; the next one takes the expired lease over at "
        "the last allowed attempt (max_attempts) and buries the record `dead`, not `unknown`; "
        "`dedup revive` says a dead record's effect never happened, so the operator revives "
        "it and the redelivery runs the handler again: a second effect under "
        "on_ambiguous='skip' (the operators surface, sim.operators)",
        "dedup.kernel.transitions.mark_dead buried an ambiguous take-over at the attempt limit "
        "as `dead` without marking it `ambiguous`, and dedup.cli.repair revived every dead "
        "record as one whose effect never happened (now: refused without --force, "
        "repair.possibly_effected)",
        ("at-most-once",),
        lambda d: "after `dedup revive` of a dead record" in d,
        {},
        surface="operators",
    ),
    Hole(
        "a reused key answered another request's response",
        "in transaction mode, two requests with one key and different bodies run at once; "
        "the second's transaction aborts, and the read after its failed attempt finds the "
        "first one's record sent: it is answered as a duplicate, the other body's stored "
        "response replayed, where a reused key is 422 `idempotency-key-reused` (the "
        "HTTP and callable surfaces, sim.requests)",
        "dedup.kernel.atomic._record_failed_attempt skipped a final record it read "
        "(Claim.SKIP, run.skip) without comparing its payload fingerprint (run.check_record)",
        ("refusal",),
        lambda d: "another body's answer" in d or "another call's" in d,
        {},
        surface="http",
    ),
]


def known(violations: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The violations no open hole explains: every one of them, once every fix is merged."""
    return [v for v in violations if not any(h.open and h.found_in([v]) for h in HOLES)]


def search(hole: Hole, seeds: Iterator[int], limit: int) -> tuple[int | None, int]:
    """The first seed of `seeds` (at most `limit` runs of the hole's family) whose run shows
    `hole`, and how many runs it took."""
    from sim.old_kernel import taken_back
    from sim.seams import quiet

    runs = 0
    with taken_back(hole.name), quiet():
        for seed in seeds:
            if runs >= limit:
                break
            runs += 1
            if hole.found_in(run_on(hole, seed).violations):
                return seed, runs
    return None, runs


def run_on(hole: Hole, seed: int) -> Any:
    """The run of `seed` in the runs that find `hole`: its family's kernel scenario, or the
    seed run as its surface."""
    from sim.runs import run_one
    from sim.scenario import make

    if hole.surface == "operators":
        from sim.operators import run_operators

        return run_operators(seed, disabled=frozenset())
    if hole.surface in ("http", "callable"):
        from sim.requests import run_request

        return run_request(seed, hole.surface, disabled=frozenset())
    return run_one(seed, scenario=make(seed, **hole.family))
