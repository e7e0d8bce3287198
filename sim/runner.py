"""One run: the platform that delivers a scenario's events to the instances and retries what
failed, over a world of virtual time; then the invariants.

The platform plays Cloud Functions' at-least-once delivery: an answer that is an error (any
exception) is retried after a pause; a delivery whose process died is retried after the
function's timeout; a normal return ends that copy. A killed instance is replaced by a fresh
process (a new front door: nothing of its memory survives). Faults stop at the scenario's
`faults.until`, so every event has time to end; each event gets at most `cap` deliveries.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from opentelemetry import trace

from dedup import AsyncDeduplicator, DedupConfig, Deduplicator, Outcome
from dedup.kernel.delivery import drive
from dedup.telemetry import Telemetry
from sim import catalogue, seams
from sim.handlers import Effect, handler_for, reconcile_for
from sim.records import SimFlowIO, SimRecords, SimTransaction
from sim.scenario import Scenario, make
from sim.server import EPOCH
from sim.surfaces import unit
from sim.world import Died, Instance, Task, World

CATALOGUE_RUNS = 0.15
"""The share of runs whose user data comes from `sim.catalogue` (`Env.catalogue`)."""
SLOW_USER_CODE = 0.1
"""The share of runs whose user code (`reconcile`, step functions, handlers) takes its time
(`Env.user_time`)."""
COLLECTION = "triggerEvents"
SUFFIX = "fn"
HORIZON = 4 * 3600.0


class _NoSpan:
    """A span's block that makes no span and sets no context: the current span stays
    `INVALID_SPAN`, as under the API's no-op tracer."""

    def __enter__(self) -> trace.Span:
        return trace.INVALID_SPAN

    def __exit__(self, *_: object) -> None:
        return None


class _Untraced(trace.TracerProvider):
    """Telemetry's public `tracer_provider` setting, switched off: the simulator checks
    records and effects, never spans, and the API's no-op tracer still costs a context
    switch per delivery."""

    class _Tracer(trace.NoOpTracer):
        def start_as_current_span(self, *_: Any, **__: Any) -> Any:
            return _NoSpan()

    def get_tracer(self, *_: Any, **__: Any) -> trace.Tracer:
        return self._Tracer()


TELEMETRY = Telemetry(tracer_provider=_Untraced())


@dataclass
class Answer:
    """What one delivery answered, and the record when it did."""

    task: Task
    answer: Any
    at: float
    record: dict[str, Any] | None


@dataclass
class Env:
    """What a run's handlers reach: the world, the ledger, the scenario's draws."""

    world: World
    scenario: Scenario
    effects: list[Effect] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    writes: int = 0
    records: SimRecords | None = None
    slow: bool = False
    """User code takes its time in this run (`user_time`): a draw of the seed's own
    (`sim.surfaces.unit`); how long, from `World.slow_rng`."""

    catalogue: bool = False
    """This run's user data comes from the catalogue (`sim.catalogue`): a draw of the seed's
    own (`sim.surfaces.unit`); the values from `World.values_rng`: a step's value (and the
    next step's argument), a note, the handler's result, its failures' texts, an HTTP body, a
    callable's result and `HttpsError` details."""
    drawn: dict[str, Any] = field(default_factory=dict)
    """The catalogue's draws of the run (the same on every delivery: a user's function)."""
    seen: dict[str, list[Any]] = field(default_factory=dict)
    """Per step key (`<record key>/<name>`), the value each delivery's handler was handed
    (`sim.handlers.shape`)."""
    refused: dict[str, float] = field(default_factory=dict)
    """The step keys (and `<record key>/note`) refused with `RecordRefused`, at the time of the
    first refusal."""

    def __post_init__(self) -> None:
        self.slow = unit(self.world.seed, 2) < SLOW_USER_CODE
        self.catalogue = unit(self.world.seed, 3) < CATALOGUE_RUNS
        if self.catalogue:
            rng = self.world.values_rng
            self.world.user_values = True
            self.drawn = {
                "step": catalogue.value(rng),
                "note": catalogue.value(rng),
                "result": catalogue.value(rng),
                "failure": catalogue.text(rng),
                "terminal": catalogue.text(rng),
                "json": ("json", catalogue.json_value(rng)),
                "details": ("json", catalogue.json_value(rng)),
                "body": ("bytes", rng.randbytes(rng.randint(0, 64))),
                "status": ("status", rng.choice(catalogue.HTTP_STATUSES)),
                "header": ("header", catalogue.header_value(rng)),
            }

    def user(self, what: str, default: Any) -> Any:
        """The catalogue's `what` in a run of the catalogue, else `default`."""
        return self.drawn[what][1] if self.catalogue else default

    def user_time(self, where: str) -> None:
        """The user's callback `where` takes its time, on virtual time: in a run whose user
        code is slow, now and then longer than the lease and the budget (up to two leases), or
        it freezes (ten leases). Drawn from `World.slow_rng`: the seed's other draws stay."""
        if not self.slow:
            return
        rng, lease = self.world.slow_rng, self.scenario.lease_seconds
        if rng.random() >= 0.3:
            return
        seconds = rng.uniform(0.5, 2.0 * lease) if rng.random() < 0.85 else 10.0 * lease
        self.world.fault_counts["slow_user_code"] = (
            self.world.fault_counts.get("slow_user_code", 0) + 1
        )
        if self.world.tracing and self.world.current is not None:
            name = self.world.current.name
            self.world.trace.add(self.world.now, name, "user", "{} takes {:.3f} s", where, seconds)
        self.world.sleep(seconds)

    def draw(self) -> float:
        return self.world.rng.random()

    def handler_starts(self) -> None:
        task = self.world.current
        if task is not None and task.handler_at is None:
            task.handler_at = self.world.now

    def handler_fails(self) -> bool:
        chance = self.scenario.handler_failure
        return self.world.now < self.world.faults.until and chance > 0 and self.draw() < chance

    def next_write(self) -> int:
        self.writes += 1
        return self.writes

    def effect(self, kind: str, key: str, identity: str, *, step: bool = False) -> None:
        task = self.world.current
        assert task is not None
        live = self.lease_live(task) if step and kind == "charge" else True
        self.world.ask(("effect", Effect(task.event, kind, key, identity, task.name, 0.0, live)))

    def applied(self, task: Task, entry: Effect) -> None:
        self.effects.append(Effect(**{**entry.__dict__, "at": self.world.now}))

    def lease_live(self, task: Task) -> bool:
        """The delivery `task` holds its record's lease, live at the database's clock now."""
        key = f"{task.event}-{SUFFIX}"
        found = self.world.server.docs.get(f"{COLLECTION}/{key}")
        if found is None:
            return False
        data = found[0]
        started, seconds = data.get("leaseStartedAt"), data.get("leaseSeconds") or 0
        if data.get("owner") not in task.tokens or started is None:
            return False
        return EPOCH + timedelta(seconds=self.world.now) < started + timedelta(seconds=seconds)

    def landed(self, key: str) -> bool:
        return any(e.kind == "effect" and e.key == key for e in self.effects)

    def mismatch(self, what: str) -> None:
        self.mismatches.append(what)

    def items(self, delivery: Any, scenario: Scenario) -> list[str]:
        items = [f"item{i}" for i in range(scenario.items)]
        if scenario.reorder and self.draw() < 0.5:
            items.reverse()
        return items

    def facade_ref(self, path: str) -> Any:
        assert self.records is not None
        return self.records.client.collection(path.rsplit("/", 1)[0]).document(
            path.rsplit("/", 1)[1]
        )

    def read_in(self, transaction: Any, ref: Any) -> Any:
        return SimTransaction.get(transaction, ref)


@dataclass
class Result:
    """What one run did and broke."""

    seed: int
    scenario: Any
    """The run's `Scenario` (or `sim.requests.RequestScenario`)."""
    world: World
    env: Env
    answers: list[Answer]
    violations: list[tuple[str, str, str]]  # (invariant, row, detail)
    deliveries: int
    interleaving: int
    surface: str = ""
    """The surface the run attacked (`sim.surfaces`); for a kernel scenario, `steps` when its
    handler takes durable steps, else `kernel`."""

    def __post_init__(self) -> None:
        if not self.surface:
            self.surface = "steps" if self.scenario.program == "steps" else "kernel"

    def report(self, limit: int | None = None) -> str:
        lines = [self.scenario.describe(), ""]
        lines += self.world.trace.render(limit)
        lines.append("")
        lines.append("answers:")
        for a in self.answers:
            lines.append(f"  {a.at:10.4f} {a.task.name}: {_answer(a.answer)}")
        lines.append("effects:")
        lines += [f"  {e.at:10.4f} {e.task}: {e}" for e in self.env.effects] or ["  none"]
        lines.append("records:")
        for path, (data, stamp) in sorted(self.world.server.docs.items()):
            shown = {k: v for k, v in data.items() if k not in ("zeros",)}
            lines.append(f"  {path} @{stamp}: {_short(shown)}")
        if self.violations:
            lines.append("VIOLATIONS:")
            lines += [f"  [{name}] ({row}) {detail}" for name, row, detail in self.violations]
        # a user's text may hold lone surrogates (`sim.catalogue`): shown escaped
        return "\n".join(lines).encode("utf-8", "backslashreplace").decode("utf-8")


def _answer(answer: Any) -> str:
    if isinstance(answer, Outcome):
        return f"{answer.kind.value} (attempt {answer.attempt}, gave_up={answer.gave_up})"
    if hasattr(answer, "status_code") and hasattr(answer, "get_data"):  # an HTTP response
        headers = {k: v for k, v in answer.headers.items() if k != "Content-Length"}
        return f"HTTP {answer.status_code} {headers} {answer.get_data()[:160]!r}"
    if not isinstance(answer, BaseException):
        return f"returned {_short(answer)}"
    if type(answer).__name__ == "HttpsError":  # a callable's (firebase-functions)
        code, message = getattr(answer, "code", None), getattr(answer, "message", "")
        details = getattr(answer, "details", None)
        return f"HttpsError {getattr(code, 'value', code)}: {message!r} {details!r}"
    return f"raised {type(answer).__name__}: {str(answer)[:160]}"


def _short(data: dict[str, Any]) -> str:
    text = repr(data)
    return text if len(text) < 600 else text[:600] + "…"


class Platform:
    """Delivers, retries, replaces dead instances."""

    def __init__(self, world: World, scenario: Scenario, env: Env) -> None:
        self.world = world
        self.scenario = scenario
        self.env = env
        self.instances = [
            Instance(f"i{n}", skew=scenario.skews[n], frozen_wall=scenario.frozen_walls[n])
            for n in range(scenario.instances)
        ]
        self.count: dict[str, int] = {}
        self.answers: list[Answer] = []
        self.handler = handler_for(scenario, env)
        self.reconcile = reconcile_for(scenario, env)
        world.on_answer = self.answered  # type: ignore[method-assign]
        world.on_death = self.died  # type: ignore[method-assign]
        world.effect_applied = env.applied  # type: ignore[method-assign]

    def plan(self) -> None:
        for start, event, instance in self.scenario.deliveries:
            self.world.at(start, self.deliver, event, instance)

    def deliver(self, event: str, index: int) -> None:
        number = self.count.get(event, 0) + 1
        if number > self.cap_of(event):
            return
        self.count[event] = number
        instance = self.instances[index]
        if not instance.alive or instance.front is None:
            self.start_process(instance)
        task = Task(
            len(self.world.tasks) + 1,
            f"{instance.name}/d{len(self.world.tasks) + 1}",
            instance,
            event,
            lambda: None,
        )
        task.body = self.body(instance, event)
        self.world.spawn(task)

    def cap_of(self, event: str) -> int:
        """The deliveries `event` gets at most (`Scenario.cap`)."""
        return self.scenario.cap

    def start_process(self, instance: Instance) -> None:
        self.start_front(instance, self.config_of(instance))

    def start_front(self, instance: Instance, config: DedupConfig) -> None:
        """The process's front door, over the simulated store, with `config`."""
        scenario = self.scenario
        awaited = scenario.front == "async"
        records = SimRecords(
            self.world, COLLECTION, rpc_timeout_seconds=scenario.rpc_timeout, awaited=awaited
        )
        self.env.records = records
        if awaited:
            instance.front = AsyncDeduplicator(
                config, records=SimFlowIO(records), telemetry=TELEMETRY
            )
        else:  # its pauses and turns switch greenlets, never suspend: the sync door drives it
            instance.front = Deduplicator(config, records=SimFlowIO(records), telemetry=TELEMETRY)

    def config_of(self, instance: Instance, **extra: Any) -> DedupConfig:
        """A fresh process on `instance`: alive, no turns, its own wall clock; its config."""
        scenario, world = self.scenario, self.world
        instance.alive = True
        instance.turns = {}

        last: list[Any] = [None, None]  # (virtual time, the wall clock then): read often

        def clock() -> Any:
            now = world.now
            if last[0] == now:
                return last[1]
            if instance.frozen_wall is not None and instance.frozen_wall[0] <= now:
                now = min(now, instance.frozen_wall[1]) if now < instance.frozen_wall[1] else now
                now = instance.frozen_wall[0] if now < instance.frozen_wall[1] else now
            last[:] = world.now, EPOCH + timedelta(seconds=now + instance.skew)
            return last[1]

        config = DedupConfig(
            collection=COLLECTION,
            lease_seconds=scenario.lease_seconds,
            rpc_timeout_seconds=scenario.rpc_timeout,
            function_timeout_seconds=scenario.function_timeout,
            max_attempts=scenario.max_attempts,
            min_retry_seconds=scenario.min_retry,
            cache_size=scenario.cache_size,
            clock=clock,
            **extra,
        )
        return config

    def body(self, instance: Instance, event: str) -> Any:
        front, scenario = instance.front, self.scenario
        options = {
            "mode": scenario.mode,
            "payload": f"payload of {event}",
            "reconcile": self.reconcile,
            "on_ambiguous": scenario.on_ambiguous,
        }

        def run() -> Any:
            if scenario.front == "async":
                return drive(front.run(event, SUFFIX, self.handler, **options))
            return front.run(event, SUFFIX, self.handler, **options)

        return run

    def record(self, event: str) -> dict[str, Any] | None:
        found = self.world.server.docs.get(f"{COLLECTION}/{event}-{SUFFIX}")
        return dict(found[0]) if found else None

    def answered(self, task: Task) -> None:
        self.answers.append(Answer(task, task.answer, self.world.now, self.record(task.event)))
        if not isinstance(task.answer, Outcome):
            pause = self.world.rng.uniform(0.2, 1.5 * self.scenario.lease_seconds)
            self.retry(task.event, self.world.now + pause)

    def died(self, task: Task) -> None:
        when = max(self.world.now, task.started_at + self.scenario.budget) + self.world.rng.uniform(
            0.1, 3
        )
        self.retry(task.event, when)

    def retry(self, event: str, when: float) -> None:
        self.world.at(when, self.deliver, event, self.world.rng.randrange(len(self.instances)))


def play(world: World, platform: Any) -> None:
    """Plan `platform`'s deliveries in `world` and run them to the horizon, the world current
    for the kernel's seams (`sim.seams`); then end every task still waiting (its process is
    gone when the run ends)."""
    previous, seams.CURRENT = seams.CURRENT, world
    try:
        platform.plan()
        world.run(HORIZON)
        world.closing = True
        for task in world.tasks:
            if not task.done and task.glet is not None and not task.glet.dead:
                task.dead = True
                with contextlib.suppress(Died):
                    task.glet.throw(Died())
    finally:
        seams.CURRENT = previous


def run_kernel(
    seed: int,
    *,
    detail: bool = False,
    disabled: frozenset[int] = frozenset(),
    scenario: Scenario | None = None,
) -> Result:
    """Run the kernel's scenario of `seed` (or `scenario`) to its end and check the invariants
    (`sim.runs.run_one` runs any seed on its own surface)."""
    from sim.invariants import check

    scenario = scenario or make(seed)
    faults = scenario.faults
    if disabled:
        faults = type(faults)(**{**faults.__dict__, "disabled": disabled})
    world = World(seed, scenario.concurrency, faults, detail=detail)
    env = Env(world, scenario)
    platform = Platform(world, scenario, env)
    play(world, platform)
    violations = check(scenario, world, env, platform)
    return Result(
        seed,
        scenario,
        world,
        env,
        platform.answers,
        violations,
        len(world.tasks),
        world.schedule_hash,
    )
