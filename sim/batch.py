"""Many runs: seeds spread over worker processes (one per core), for a time or a count, and
what they add up to (`Summary`, written to sim/results.json)."""

from __future__ import annotations

import gc
import multiprocessing
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sim import seams
from sim.server import MODES
from sim.surfaces import SURFACES

MAX_KEPT = 50
"""Violations kept with their seed (all are counted)."""


@dataclass
class Summary:
    """What a batch of runs did."""

    runs: int = 0
    seconds: float = 0.0
    interleavings: set[int] = field(default_factory=set)
    by_mode: dict[str, Counter[str]] = field(default_factory=lambda: {m: Counter() for m in MODES})
    faults: Counter[str] = field(default_factory=Counter)
    invariants: Counter[str] = field(default_factory=Counter)
    violations: list[dict[str, Any]] = field(default_factory=list)
    violating_runs: int = 0
    """Runs that broke an invariant, excused or not."""
    unexplained: int = 0
    """Runs with a violation no open hole (`sim.holes`, a fix not merged yet) explains: the
    `violations` of sim/results.json."""
    by_hole: Counter[str] = field(default_factory=Counter)
    deliveries: int = 0
    first_seed: int = 0
    by_surface: dict[str, Counter[str]] = field(
        default_factory=lambda: {s: Counter() for s in SURFACES}
    )
    """Per surface (`sim.surfaces`): runs, violations (as `unexplained`), deliveries."""
    surface_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SURFACES, 0.0))
    """Per surface: the seconds its runs took, summed over the workers."""
    workers: int = 1

    def add(self, other: Summary) -> None:
        self.runs += other.runs
        self.interleavings |= other.interleavings
        for mode in MODES:
            self.by_mode[mode].update(other.by_mode[mode])
        self.faults.update(other.faults)
        self.invariants.update(other.invariants)
        self.violating_runs += other.violating_runs
        self.unexplained += other.unexplained
        self.by_hole.update(other.by_hole)
        self.deliveries += other.deliveries
        for surface in SURFACES:
            self.by_surface[surface].update(other.by_surface[surface])
        for surface, seconds in other.surface_seconds.items():
            self.surface_seconds[surface] += seconds
        self.violations.extend(other.violations[: MAX_KEPT - len(self.violations)])

    def as_json(self) -> dict[str, Any]:
        rate = self.runs / self.seconds if self.seconds else 0.0
        return {
            "runs": self.runs,
            "seconds": round(self.seconds, 2),
            "runs_per_second": round(rate, 1),
            "deliveries": self.deliveries,
            "interleavings": len(self.interleavings),
            "violations": self.unexplained,
            "surfaces": self.surfaces(),
            "modes": {m: dict(self.by_mode[m]) for m in MODES},
            "faults": dict(sorted(self.faults.items())),
            "invariants_broken": dict(sorted(self.invariants.items())),
            "runs_breaking_an_invariant": self.violating_runs,
            "runs_by_open_hole": dict(sorted(self.by_hole.items())),
            "first_seed": self.first_seed,
            "violating_seeds": self.violations,
        }

    def surfaces(self) -> dict[str, dict[str, Any]]:
        """Per surface: its runs, deliveries, violations and runs a second. A surface's rate
        is its runs over the time its runs took on all workers, times the workers: the rate
        the batch would have reached running that surface alone."""
        out: dict[str, dict[str, Any]] = {}
        for surface in SURFACES:
            counts, seconds = self.by_surface[surface], self.surface_seconds[surface]
            rate = counts["runs"] * self.workers / seconds if seconds else 0.0
            out[surface] = {
                "runs": counts["runs"],
                "deliveries": counts["deliveries"],
                "violations": counts["violations"],
                "runs_per_second": round(rate, 1),
            }
        return out

    def text(self) -> str:
        data = self.as_json()
        lines = [
            f"{data['runs']} runs in {data['seconds']} s ({data['runs_per_second']} a second), "
            f"{data['deliveries']} deliveries, {data['interleavings']} distinct interleavings, "
            f"{data['violations']} runs broke an invariant "
            f"(and {self.violating_runs - self.unexplained} only as an open hole does: "
            f"{data['runs_by_open_hole']})",
            "  surfaces: "
            + ", ".join(
                f"{name} {c['runs']} runs ({c['runs_per_second']}/s, {c['violations']} violations)"
                for name, c in data["surfaces"].items()
            ),
            "  modes: "
            + ", ".join(f"{m} {c.get('runs', 0)} runs" for m, c in self.by_mode.items()),
            "  faults: " + ", ".join(f"{k} {v}" for k, v in data["faults"].items()),
        ]
        for v in self.violations:
            if v["open_hole"]:
                continue
            lines.append(
                f"VIOLATION seed {v['seed']} [{v['invariant']}] ({v['row']}): {v['detail']}"
            )
            lines.append(f"  replay: make simulate SEED={v['seed']}")
        return "\n".join(lines)


def run_seeds(seeds: Iterator[int], deadline: float | None) -> Summary:
    """Run `seeds` (until `deadline`, a `time.monotonic()`), in this process."""
    from sim.holes import HOLES, known
    from sim.runs import run_one

    summary = Summary()
    started = time.monotonic()
    gc.collect()  # then what lives now (the imports) is set aside: not scanned at each run
    gc.freeze()
    with seams.quiet():
        for seed in seeds:
            if deadline is not None and time.monotonic() >= deadline:
                break
            began = time.perf_counter()
            result = run_one(seed)
            summary.surface_seconds[result.surface] += time.perf_counter() - began
            by_surface = summary.by_surface[result.surface]
            by_surface["runs"] += 1
            by_surface["deliveries"] += result.deliveries
            summary.runs += 1
            summary.deliveries += result.deliveries
            summary.interleavings.add(result.interleaving)
            mode = summary.by_mode[result.scenario.concurrency]
            mode["runs"] += 1
            mode[f"{result.scenario.mode} mode"] += 1
            summary.faults.update(result.world.fault_counts)
            if result.violations:
                summary.violating_runs += 1
                unexplained = known(result.violations)
                summary.unexplained += bool(unexplained)
                mode["violations"] += bool(unexplained)
                by_surface["violations"] += bool(unexplained)
                open_ = [h for h in HOLES if h.open]
                summary.by_hole.update(h.name for h in open_ if h.found_in(result.violations))
                for v in result.violations:
                    name, row, detail = v
                    summary.invariants[name] += 1
                    if len(summary.violations) < MAX_KEPT:
                        hole = next((h.name for h in open_ if h.found_in([v])), None)
                        summary.violations.append(
                            {"seed": seed, "surface": result.surface, "invariant": name}
                            | {"row": row, "detail": detail}
                            | {"open_hole": hole}
                        )
    summary.seconds = time.monotonic() - started
    return summary


def _worker(args: tuple[int, int, int, float | None, int | None]) -> Summary:
    first, index, workers, seconds, count = args
    deadline = None if seconds is None else time.monotonic() + seconds
    total = count if count is not None else 10**12
    seeds = iter(range(first + index, first + total, workers))
    return run_seeds(seeds, deadline)


def run_batch(
    first: int, *, seconds: float | None = None, count: int | None = None, workers: int = 1
) -> Summary:
    """Seeds from `first` on, for `seconds` or `count` runs, over `workers` processes."""
    started = time.monotonic()
    # the kernel and the client library, imported once here rather than in every worker
    import sim.runs  # noqa: F401  (every surface's runner)

    jobs = [(first, i, workers, seconds, count) for i in range(workers)]
    if workers == 1:
        parts = [_worker(jobs[0])]
    else:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            parts = pool.map(_worker, jobs)
    summary = Summary(first_seed=first, workers=workers)
    for part in parts:
        summary.add(part)
    summary.violations.sort(key=lambda v: v["seed"])
    summary.seconds = time.monotonic() - started
    return summary
