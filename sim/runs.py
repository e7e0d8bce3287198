"""One run of any seed, on the surface it draws (`sim.surfaces.drawn_surface`): the kernel's
scenario (`sim.runner`), the HTTP or callable entrance (`sim.requests`), or the operators
(`sim.operators`). Kept apart from all three, which share `sim.runner`'s platform, so that
none of them imports another to dispatch."""

from __future__ import annotations

from sim.operators import run_operators
from sim.requests import run_request
from sim.runner import Result, run_kernel
from sim.scenario import Scenario
from sim.surfaces import drawn_surface

__all__ = ["Result", "run_one"]


def run_one(
    seed: int,
    *,
    detail: bool = False,
    disabled: frozenset[int] = frozenset(),
    scenario: Scenario | None = None,
) -> Result:
    """Run `seed` to its end and check the invariants. With a `scenario`, that kernel scenario;
    without, the seed's surface says what runs."""
    if scenario is None:
        surface = drawn_surface(seed)
        if surface in ("http", "callable"):
            return run_request(seed, surface, detail=detail, disabled=disabled)
        if surface == "operators":
            return run_operators(seed, detail=detail, disabled=disabled)
    return run_kernel(seed, detail=detail, disabled=disabled, scenario=scenario)
