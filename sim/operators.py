"""The operators surface: the kernel's deliveries, with an operator who runs `dedup release`,
`dedup revive` and redrives at seeded times, against live events, keeping to the preconditions
the docs give (docs/operations.md, the commands' help in `dedup.cli.repair`).

A run is a kernel scenario of one keyed effect in lease mode (`sim.scenario.make`, program
`plain` or `noted`, every other choice the seed's), plus the operator's turns drawn from a
randomness of their own. At each turn the operator reads the event's record (an RPC of its own,
through the same faults) and, by what it finds:

* `release` a lease whose delivery crashed (its process died: the operator has the logs): the
  record's own check (`_release_problem`) and a write guarded by the read's update time, as
  `dedup.cli.guarded.apply_guarded` makes it, of `operator_released()`;
* `revive` a dead or failed record (the effect never happened: docs), or an unknown one whose
  effect the operator found did not happen (the ledger has none: "revive one only once you
  know its effect did not happen"), then redeliver it (revive delivers nothing: the runbook);
* redrive: deliver the event once more, whatever its state (a dead letter redriven, a replay).

No command may make an effect run twice where the docs promise it cannot: the kernel's
invariants (`sim.invariants`) hold over the whole run, the operator's writes included.
`dedup purge` is not driven: its precondition (`--older-than` past the platform's redelivery
window, days) leaves nothing a run of minutes could meet.
"""

from __future__ import annotations

import random
from dataclasses import replace

from google.api_core import exceptions as api

from dedup.cli.repair import _release_problem, _revive_problem
from dedup.kernel.record import Record
from dedup.kernel.transitions import operator_released, revived
from sim.runner import COLLECTION, SUFFIX, Env, Platform, Result, play
from sim.scenario import Scenario, make
from sim.server import Write, us_of
from sim.values import encode
from sim.world import Instance, Task, World

COMMANDS = ("release", "revive", "redrive")


class OperatorPlatform(Platform):
    """The platform, and an operator acting at seeded times."""

    def __init__(self, world: World, scenario: Scenario, env: Env, rng: random.Random) -> None:
        super().__init__(world, scenario, env)
        self.rng = rng
        self.desk = Instance("operator")
        self.acted: list[tuple[float, str, str]] = []
        """(time, command, what came of it) of each operator turn."""
        self.extra: dict[str, int] = {}
        """Per event, the deliveries the operator made (each raises its cap by one)."""
        self.writes: list[tuple[float, float, str, str]] = []
        """(sent, answered, command, the state it found) of each operator write that may have
        applied."""
        self.retries = 0

    def plan(self) -> None:
        super().plan()
        span = self.scenario.faults.until + 4 * self.scenario.lease_seconds
        for _ in range(self.rng.randint(1, 4)):
            event = self.rng.choice(self.scenario.events)
            self.world.at(self.rng.uniform(0, span), self.turn, event)

    def turn(self, event: str) -> None:
        self.desk.alive = True
        n = len(self.world.tasks) + 1
        task = Task(n, f"operator/o{n}", self.desk, event, lambda: None)
        task.body = lambda: self.act(event)
        self.world.spawn(task)

    def act(self, event: str) -> str:
        """One operator turn on `event`: read its record, run the command it calls for."""
        records = self.env.records
        if records is None:  # no process has started yet: nothing to look at
            return "nothing to read"
        path = f"{COLLECTION}/{event}-{SUFFIX}"
        try:
            snapshot = records.get(path)
        except (api.GoogleAPICallError, api.RetryError) as exc:
            self.again(event)
            return self.done("read", f"failed: {type(exc).__name__}")
        record = Record.from_snapshot(snapshot)
        if record is None:
            return self.done("read", "no record yet")
        if _release_problem(record) is None and self.crashed(record.owner):
            fields, command = operator_released(), "release"
        elif _revive_problem(record) is None and self.effect_absent(event, record):
            fields, command = revived(), "revive"
        else:
            self.redeliver(event)
            return self.done("redrive", f"of a {record.state.value} record")
        assert snapshot.update_time is not None  # the record exists
        guard = us_of(snapshot.update_time)
        write = Write("update", path, encode(fields), guard)
        sent = self.world.now
        try:
            records.write([write], f"operator {command} {path}")
        except (api.FailedPrecondition, api.NotFound):
            return self.done(command, "skipped: the record changed since it was read")
        except (api.GoogleAPICallError, api.RetryError) as exc:  # failed, or its answer lost
            self.writes.append((sent, self.world.now, command, record.state.value))
            self.again(event)  # the operator looks again (`dedup show`) a little later
            return self.done(command, f"failed: {type(exc).__name__}")
        self.writes.append((sent, self.world.now, command, record.state.value))
        if command == "revive":  # revive delivers nothing: the runbook redelivers
            self.redeliver(event)
        return self.done(command, f"of a {record.state.value} record")

    def done(self, command: str, what: str) -> str:
        self.acted.append((self.world.now, command, what))
        if self.world.tracing:
            self.world.trace.add(self.world.now, "operator", command, "{}", what)
        return f"{command}: {what}"

    def again(self, event: str) -> None:
        """A command that failed: the operator looks at the record again a little later (at
        most three times a run)."""
        if self.retries < 3:
            self.retries += 1
            pause = self.rng.uniform(1.0, float(self.scenario.lease_seconds))
            self.world.at(self.world.now + pause, self.turn, event)

    def redeliver(self, event: str) -> None:
        """A delivery the operator makes: not one of the platform's retries, so it does not
        count against their cap."""
        self.extra[event] = self.extra.get(event, 0) + 1
        self.world.at(self.world.now, self.deliver, event, self.rng.randrange(len(self.instances)))

    def cap_of(self, event: str) -> int:
        return self.scenario.cap + self.extra.get(event, 0)

    def crashed(self, owner: str | None) -> bool:
        """The delivery that owns the lease died with its process (what `dedup release` is
        for: "a record whose handler crashed"); a live one is never released."""
        owners = [t for t in self.world.tasks if owner is not None and owner in t.tokens]
        return bool(owners) and all(t.dead for t in owners)

    def effect_absent(self, event: str, record: Record) -> bool:
        """Dead and failed records never had their effect (docs); an unknown one is revived
        only when the operator found its effect did not happen (the ledger has none)."""
        if record.state.value != "unknown":
            return True
        return not self.env.landed(f"{event}-{SUFFIX}")

    def answered(self, task: Task) -> None:
        if task.instance is self.desk:
            return
        super().answered(task)

    def died(self, task: Task) -> None:
        if task.instance is self.desk:  # the operator's session died: it looks again later
            self.again(task.event)
            return
        super().died(task)


def run_operators(seed: int, *, detail: bool = False, disabled: frozenset[int]) -> Result:
    """Run the operators surface's `seed` to its end and check the kernel's invariants."""
    from sim.invariants import check

    rng = random.Random(seed * 67867967 + 11)
    scenario = make(seed, mode="lease", program=rng.choice(("plain", "noted")))
    if disabled:
        scenario.faults = replace(scenario.faults, disabled=disabled)
    world = World(seed, scenario.concurrency, scenario.faults, detail=detail)
    env = Env(world, scenario)
    platform = OperatorPlatform(world, scenario, env, rng)
    play(world, platform)
    violations = _read_by_the_operator(check(scenario, world, env, platform), platform)
    for _, command, what in platform.acted:
        world.fault_counts[f"operator {command}"] = world.fault_counts.get(
            f"operator {command}", 0
        ) + ("skipped" not in what and "failed" not in what)
    return Result(
        seed, scenario, world, env, platform.answers, violations, len(world.tasks),
        world.schedule_hash, surface="operators",
    )  # fmt: skip


def _capped_after_a_write(detail: str, platform: OperatorPlatform) -> bool:
    """The event's deliveries reached their cap, and its last answer came before an operator's
    write: the simulator's cap stopped the retries after the write, not the library."""
    event = detail.split(" ", 1)[0].rsplit("-", 1)[0]
    if platform.count.get(event, 0) < platform.cap_of(event):
        return False
    answered = [a.at for a in platform.answers if a.task.event == event]
    wrote = [sent for sent, _, _, _ in platform.writes]
    return bool(wrote) and (not answered or max(answered) < max(wrote))


def _read_by_the_operator(
    violations: list[tuple[str, str, str]], platform: OperatorPlatform
) -> list[tuple[str, str, str]]:
    """The kernel's violations as they stand with an operator about: an `answer` of a delivery
    during which an operator's write applied is checked against a record the delivery never
    read (it answered what it read), so it is left out; an `at-most-once` after a revive of a
    dead record says so (docs: a dead record's effect never happened)."""
    spans = {a.task.name: (a.task.started_at, a.at) for a in platform.answers if a.task.name}
    kept = []
    for name, row, detail in violations:
        if name == "answer":
            who = detail.split(" ", 1)[0].rstrip(":")
            start, end = spans.get(who, (0.0, 0.0))
            if any(sent <= end and start <= at for sent, at, _, _ in platform.writes):
                continue
        if name == "final-or-leased" and _capped_after_a_write(detail, platform):
            continue
        if name == "at-most-once":
            revived = [f"{at:.3f}" for _, at, _, state in platform.writes if state == "dead"]
            if revived:
                detail += f" (after `dedup revive` of a dead record at {', '.join(revived)})"
        kept.append((name, row, detail))
    return kept
