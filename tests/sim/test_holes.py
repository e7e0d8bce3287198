"""The simulator finds the known holes (`sim.holes`) without a scenario written for any of
them: each is searched for in the family of runs pointed at the kind of function it needs
(lease mode, the handler's program), every fault and schedule drawn from the seed.

Every search runs with the hole's fix taken back (`sim.old_kernel.taken_back` puts in place
the fixed kernel's function that holds the fix, with exactly that fix taken out, named in
`Hole.depends_on`), so the test asserts that the simulator still finds each hole the kernel
no longer has. A simulator that stops finding a known hole fails."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from dedup.kernel import lease
from sim.holes import HOLES, Hole, search
from sim.runs import run_one
from sim.scenario import make
from sim.seams import quiet

LIMITS = {
    "give-back erases ambiguity": 1500,
    "result fits JSON, not the document": 20,
    "plain step after the lease": 500,
    "replay with other arguments": 20,
    "step values Firestore cannot keep": 50,
    "step check read past the budget": 20,
    "stale deadline past the budget": 100,
    "a step value read back as another type": 3500,
    "an error text Firestore cannot store": 420,
    "callable details json.dumps cannot encode": 330,
    "a slow reconcile starts the handler after the lease": 1800,
    "a waiting HTTP copy with a fresh budget": 40,
    "revive of a dead record whose effect happened": 2200,
    "a reused key answered another request's response": 1400,
}
"""Runs allowed to find each hole in its family (about twice what it took from seed 0 with
its fix taken back, at least 20)."""


@cache
def first_found(name: str) -> tuple[int | None, int]:
    """The first seed from 0 whose run shows the hole `name` with its fix taken back, and how
    many runs it took; searched once a session, for both tests that need it."""
    [hole] = [h for h in HOLES if h.name == name]
    return search(hole, iter(range(10**6)), LIMITS[name])


@pytest.mark.parametrize("hole", HOLES, ids=[h.name for h in HOLES])
def test_the_simulator_finds_the_hole(hole: Hole) -> None:
    seed, runs = first_found(hole.name)
    assert seed is not None, (
        f"{hole.name}: not found in {runs} runs; it depends on: {hole.depends_on}"
    )


def test_a_fix_taken_back_is_found_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mechanism end to end, on a stand-in fix of the give-back hole (the lease is left to
    expire, as ambiguous as it was found): the run that showed the hole shows it no more, and
    the search, which takes the fix back, finds it again at the same seed."""
    hole = HOLES[0]
    found, _ = first_found(hole.name)
    assert found is not None

    async def fixed(run: Any, lease_: Any) -> Any:
        run.spent("start the handler of")

    monkeypatch.setattr(lease, "_give_back_unstarted", fixed)
    with quiet():
        result = run_one(found, scenario=make(found, **hole.family))
    assert not hole.found_in(result.violations)
    again, _ = search(hole, iter([found]), 1)
    assert again == found
    assert lease._give_back_unstarted is fixed  # the search put the stand-in fix back after
