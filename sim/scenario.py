"""What one run delivers, drawn from its seed: the function (mode, handler, steps,
`on_ambiguous`, `reconcile`, settings), the events, the deliveries and instances, the faults.

Every choice is a draw of `random.Random(seed)`, so a seed is a whole run and
`make simulate SEED=<n>` replays it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from sim.server import MODES
from sim.world import Faults

PROGRAMS = {
    "lease": ("plain", "plain", "noted", "steps", "steps", "steps", "steps"),
    "transaction": ("counter",),
    "write_only": ("batch",),
}
"""The handlers of each mode (`sim.handlers`), repeated as often as they are drawn."""
BIG_RESULTS = 0.005
"""The share of lease and transaction runs whose handler returns a long list of zeros, kept
rare: each one exercises the kernel's room checks on a result near the limits
(`dedup.kernel.room.storable_result`), and a run that returns one costs several ordinary runs
(about 18 ms of CPU here)."""
ODD_VALUES = 0.05
"""The share of step handlers with one step whose value or name Firestore would not keep as
given (`ODD_KINDS`): a `Decimal`, nested arrays, a `set`, a name Firestore reserves."""
ODD_KINDS = ("decimal", "nested", "set", "reserved")
STEP_KINDS = ("charges", "reserve", "receipt", "branch")
"""The steps a `steps` handler may take (`sim.handlers.steps_program`)."""


@dataclass
class Scenario:
    """One run's function, events, deliveries and faults."""

    seed: int
    concurrency: str
    mode: str
    front: str  # "sync" (Deduplicator) or "async" (AsyncDeduplicator)
    program: str
    on_ambiguous: str
    reconcile: str | None  # None, "truthful", "unsure" (None), "flaky" (raises at times)
    lease_seconds: int
    rpc_timeout: int
    function_timeout: int | None
    max_attempts: int
    min_retry: int
    cache_size: int
    events: list[str]
    deliveries: list[tuple[float, str, int]]  # (start, event, instance)
    instances: int
    skews: list[float]
    frozen_walls: list[tuple[float, float] | None]
    faults: Faults
    steps: list[str] = field(default_factory=list)
    items: int = 2
    reorder: bool = False
    odd: str = ""
    """The `odd` step's kind (`ODD_KINDS`), when there is one."""
    zeros: int = 0
    handler_failure: float = 0.0
    terminal: float = 0.0
    cap: int = 16
    """Deliveries of one event at most (the platform's retries included)."""

    @property
    def budget(self) -> float:
        """The delivery's time budget (`DedupConfig.delivery_budget_seconds`)."""
        if self.function_timeout is not None:
            return float(self.function_timeout)
        return float(max(1, self.lease_seconds - self.rpc_timeout))

    def describe(self) -> str:
        parts = [
            f"seed {self.seed}: {self.concurrency} store, {self.mode} mode ({self.front}), "
            f"handler {self.program}",
        ]
        if self.steps:
            parts.append(
                f"steps {self.steps} over {self.items} items"
                + (" reordered" if self.reorder else "")
            )
        if self.zeros:
            parts.append(f"result of {self.zeros} zeros")
        parts.append(f"on_ambiguous={self.on_ambiguous} reconcile={self.reconcile}")
        parts.append(
            f"lease {self.lease_seconds} s, rpc timeout {self.rpc_timeout} s, "
            f"budget {self.budget:g} s, max_attempts {self.max_attempts}, "
            f"min_retry {self.min_retry} s, cache {self.cache_size}"
        )
        parts.append(
            f"{len(self.deliveries)} deliveries of {self.events} on {self.instances} instances"
        )
        f = self.faults
        parts.append(
            f"faults until {f.until:.1f} s: error {f.error_before:.2f}, "
            f"lost {f.lost_response:.2f}, slow {f.slow:.2f} (<= {f.slow_seconds:.1f} s), "
            f"kill {f.kill:.2f}, pause {f.pause:.2f} (<= {f.pause_seconds:.1f} s)"
        )
        return "\n  ".join(parts)


def make(
    seed: int,
    *,
    concurrency: str | None = None,
    mode: str | None = None,
    program: str | None = None,
    on_ambiguous: str | None = None,
) -> Scenario:
    """The scenario of `seed`; `concurrency`, `mode`, `program`, `on_ambiguous`: fixed instead
    of drawn (a family of runs pointed at one kind of function; every other choice, the faults
    and the schedule included, is still the seed's)."""
    rng = random.Random(seed)
    concurrency = concurrency or MODES[seed % 2]
    mode = mode or rng.choice(("lease", "lease", "lease", "transaction", "write_only"))
    drawn = rng.choice(PROGRAMS[mode])
    if mode != "write_only" and rng.random() < BIG_RESULTS:
        drawn = "big"
    program = program or drawn
    lease = rng.choice((3, 5, 8, 12, 20, 60))
    rpc = rng.randint(1, min(10, max(1, lease // 2)))
    timeout = rng.choice((None, None, max(1, lease - rpc - rng.randint(0, 2))))
    on_ambiguous = on_ambiguous or rng.choice(("rerun", "skip"))
    reconcile = rng.choice((None, None, "truthful", "unsure", "flaky")) if mode == "lease" else None
    events = ["e1"] if rng.random() < 0.8 else ["e1", "e2"]
    instances = rng.randint(1, 3)
    spread = rng.choice((0.0, 0.05, 1.0, float(lease), 2.0 * lease))
    deliveries = sorted(
        (rng.uniform(0, spread), rng.choice(events), rng.randrange(instances))
        for _ in range(rng.randint(2, 5))
    )
    for event in events:  # every event is delivered at least once
        if all(d[1] != event for d in deliveries):
            deliveries.append((rng.uniform(0, spread), event, rng.randrange(instances)))
    busy = rng.random()
    faults = Faults(
        until=rng.uniform(lease, 4 * lease + 10),
        error_before=rng.choice((0.0, 0.02, 0.1, 0.3)) * busy,
        lost_response=rng.choice((0.0, 0.02, 0.1, 0.3)) * busy,
        slow=rng.choice((0.0, 0.02, 0.1, 0.25)) * busy,
        slow_seconds=rng.uniform(0.5, 1.5 * lease),
        kill=rng.choice((0.0, 0.01, 0.05, 0.15)) * busy,
        pause=rng.choice((0.0, 0.01, 0.05, 0.15)) * busy,
        pause_seconds=rng.uniform(0.5, 2.0 * lease),
    )
    scenario = Scenario(
        seed=seed,
        concurrency=concurrency,
        mode=mode,
        front=rng.choice(("sync", "async")),
        program=program,
        on_ambiguous=on_ambiguous,
        reconcile=reconcile,
        lease_seconds=lease,
        rpc_timeout=rpc,
        function_timeout=timeout,
        max_attempts=rng.choice((1, 2, 3, 5, 10)),
        min_retry=rng.choice((0, 0, 5, 60)),
        cache_size=rng.choice((0, 100)),
        events=events,
        deliveries=deliveries,
        instances=instances,
        skews=[rng.choice((0.0, 0.0, -300.0, 300.0, rng.uniform(-5, 5))) for _ in range(instances)],
        frozen_walls=[
            (rng.uniform(0, lease), rng.uniform(lease, 3 * lease)) if rng.random() < 0.1 else None
            for _ in range(instances)
        ],
        faults=faults,
        handler_failure=rng.choice((0.0, 0.1, 0.3)),
        terminal=rng.choice((0.0, 0.0, 0.05)),
    )
    if program == "steps":
        count = rng.randint(1, 4)
        scenario.steps = [rng.choice(STEP_KINDS) for _ in range(count)]
        if rng.random() < ODD_VALUES:
            scenario.steps[rng.randrange(count)] = "odd"
            scenario.odd = rng.choice(ODD_KINDS)
        scenario.items = rng.randint(1, 3)
        scenario.reorder = rng.random() < 0.3
    if program == "big":
        scenario.zeros = rng.randint(100_000, 170_000)
    return scenario
