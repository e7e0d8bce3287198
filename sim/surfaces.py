"""Which of the library's surfaces a seed attacks (docs/simulation.md, "Surfaces").

A seed's surface is a draw of a randomness of its own (`surface_of`), so the runs of the kernel's
seeds are the runs they were before the other surfaces existed: a seed that draws the kernel is
run by `sim.scenario.make` exactly as before, and reported as `steps` when its handler takes
durable steps, `kernel` otherwise. `make simulate SEED=<n>` replays any seed of any surface.

* `kernel`: `Deduplicator.run` / `AsyncDeduplicator.run` with a plain, noted, counter, batch
  or big handler;
* `steps`: the same with a handler of durable steps (`delivery.step`);
* `http`: `idempotent_http` through real Flask requests (`sim.requests`);
* `callable`: `idempotent_callable` through firebase-functions' `CallableRequest`
  (`sim.requests`);
* `operators`: the kernel's deliveries with `dedup release`, `revive` and redrives at seeded
  times (`sim.operators`).
"""

from __future__ import annotations

SURFACES = ("kernel", "steps", "http", "callable", "operators")
"""Every surface, in the order sim/results.json lists them."""

SHARES = (("http", 0.07), ("callable", 0.06), ("operators", 0.07))
"""The share of seeds each surface other than the kernel's draws; the rest are the kernel's
(`kernel` or `steps`, by the handler the seed draws)."""


_MASK = (1 << 64) - 1


def unit(seed: int, salt: int) -> float:
    """A draw in [0, 1) of the seed's own for `salt` (splitmix64 of both): what decides a
    seed's surface and whether its user code is slow or its data the catalogue's, a tenth of
    the cost of seeding a `random.Random` (every run makes these draws)."""
    z = (seed * 0x9E3779B97F4A7C15 + salt * 0xD1B54A32D192ED03) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return ((z ^ (z >> 31)) >> 11) / 9007199254740992.0


def drawn_surface(seed: int) -> str:
    """`http`, `callable`, `operators`, or `kernel` for a seed the kernel's scenario runs."""
    draw = unit(seed, 1)
    for surface, share in SHARES:
        if draw < share:
            return surface
        draw -= share
    return "kernel"
