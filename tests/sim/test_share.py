"""`make test`'s share of the simulator (docs/simulation.md): a fixed range of seeds on each
concurrency mode, the real kernel under faults on virtual time. Any violation fails, with the
seed that replays it (`make simulate SEED=<n>`): the fixed holes (`sim.holes`) excuse nothing;
only a hole still `open` (its fix not merged yet) does, until its fix merges."""

from __future__ import annotations

import pytest

from sim.holes import known
from sim.runner import run_one
from sim.scenario import make
from sim.seams import quiet
from sim.server import MODES

SEEDS_PER_MODE = 500
"""About 5 s a mode on a quiet machine (a few ms a run), 10 s on a busy one."""


@pytest.mark.parametrize("concurrency", MODES)
def test_the_kernel_keeps_its_invariants_on_a_simulated_store(concurrency: str) -> None:
    unexplained: list[str] = []
    runs = violating = 0
    with quiet():
        for seed in range(SEEDS_PER_MODE):
            result = run_one(seed, scenario=make(seed, concurrency=concurrency))
            runs += 1
            violating += bool(result.violations)
            unexplained += [
                f"seed {seed} [{name}] ({row}): {detail} -- replay: make simulate SEED={seed}"
                for name, row, detail in known(result.violations)
            ]
    assert runs == SEEDS_PER_MODE
    assert unexplained == [], "\n".join(unexplained)


def test_a_seed_replays_exactly() -> None:
    """The same seed gives the same run: the same trace, answers and records."""
    with quiet():
        first = run_one(1443, detail=True)
        second = run_one(1443, detail=True)
    assert first.world.trace.render() == second.world.trace.render()
    assert first.report() == second.report()
    assert len(first.world.trace.lines) > 10
