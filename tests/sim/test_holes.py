"""The simulator finds the known holes (`sim.holes`) without a scenario written for any of
them: each is searched for in the family of runs pointed at the kind of function it needs
(lease mode, the handler's program), every fault and schedule drawn from the seed.

While a hole is open the kernel shows it as it is. Once its fix merges, its `take_back` puts
the old behaviour back (monkeypatching the one kernel function the fix changed, named in
`Hole.depends_on`) and this test still asserts that the simulator finds it: a simulator that
stops finding a known hole fails."""

from __future__ import annotations

import pytest

from sim.holes import HOLES, Hole, search

LIMITS = {
    "give-back erases ambiguity": 1500,
    "result fits JSON, not the document": 50,
    "plain step after the lease": 600,
    "replay with other arguments": 600,
    "step check read past the budget": 200,
    "stale deadline past the budget": 400,
}
"""Runs allowed to find each hole (about twice what it took, from seed 0)."""


@pytest.mark.parametrize("hole", HOLES, ids=[h.name for h in HOLES])
def test_the_simulator_finds_the_hole(hole: Hole) -> None:
    seed, runs = search(hole, iter(range(10**6)), LIMITS[hole.name])
    assert seed is not None, (
        f"{hole.name}: not found in {runs} runs; it depends on: {hole.depends_on}"
    )
