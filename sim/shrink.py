"""Replaying one seed with its trace, and shrinking a failing run to the faults it needs.

Shrinking switches the run's faults off one at a time (each fault the seed draws has a
number, `Faults.disabled`) and keeps each one off while the same invariant still breaks: what
is left is a run with only the faults the violation needs, and a trace that much shorter.
The schedule itself (latencies, which delivery goes where) stays the seed's.

Why not Hypothesis here: a run's choices are drawn while the real kernel runs, and how many
it draws depends on what the kernel did with the earlier ones, so a failing seed has no fixed
choice sequence for Hypothesis to shrink. Numbering the faults gives the one knob that keeps
the rest of the run the seed's, and greedy removal over it is enough to find what a
violation needs.
"""

from __future__ import annotations

from sim.runs import Result, run_one
from sim.seams import quiet


def first_invariant(result: Result) -> str | None:
    return result.violations[0][0] if result.violations else None


def shrink_faults(seed: int, disabled: frozenset[int] = frozenset()) -> tuple[frozenset[int], int]:
    """The faults to switch off so that the run still breaks its first invariant, and how many
    faults the original run drew."""
    with quiet():
        original = run_one(seed, disabled=disabled)
        wanted = first_invariant(original)
        drawn = original.world.fault_index
        if wanted is None:
            return disabled, drawn
        off = set(disabled)
        for index in range(1, drawn + 1):
            if index in off:
                continue
            trial = run_one(seed, disabled=frozenset(off | {index}))
            if any(v[0] == wanted for v in trial.violations):
                off.add(index)
    return frozenset(off), drawn


def replay(seed: int, disabled: frozenset[int] = frozenset(), *, shrink: bool = True) -> int:
    """Replay `seed` and print its trace; a failing run is then shrunk and printed again.
    Exit status: 1 if it breaks an invariant."""
    with quiet():
        result = run_one(seed, detail=True, disabled=disabled)
    print(result.report())
    if not result.violations:
        print(f"\nseed {seed}: no invariant broken")
        return 0
    if shrink:
        off, drawn = shrink_faults(seed, disabled)
        kept = drawn - len(off)
        if off != disabled:
            with quiet():
                small = run_one(seed, detail=True, disabled=off)
            print(f"\n===== shrunk: {kept} of the {drawn} faults are needed =====")
            print(small.report())
            listed = ",".join(str(n) for n in sorted(off))
            print(f"\nreplay the shrunk run: python -m sim --seed {seed} --disable {listed}")
    broken = "; ".join(f"[{n}] {d}" for n, _, d in result.violations)
    print(f"\nseed {seed} breaks: " + broken.encode("utf-8", "backslashreplace").decode("utf-8"))
    return 1
