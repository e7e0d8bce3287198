"""`tools/sim_cost.py`: the digest that tells whether the simulator's runs stayed the same runs
(no valgrind here: the instruction count needs it and takes a minute)."""

from __future__ import annotations

import gc
from pathlib import Path

from tools.sim_cost import callgrind_total, chosen_seeds, digest_lines, prepare

SEEDS = [0, 1, 3]
"""A kernel seed, an operators seed and a steps seed."""


def test_the_digest_of_the_same_seeds_is_the_same_each_time() -> None:
    """Three seeds digested twice in one process give the same lines: one a seed, its surface
    and a sha256, none saying the traced run differs from the run as `make simulate` runs it."""
    prepare()  # as the command does (a gc.freeze: undone after, for the tests that follow)
    try:
        first = list(digest_lines(SEEDS))
        again = list(digest_lines(SEEDS))
    finally:
        gc.unfreeze()
    assert first == again
    assert [line.split()[0] for line in first] == [str(seed) for seed in SEEDS]
    assert [line.split()[1] for line in first] == ["kernel", "operators", "steps"]
    for line in first:
        _, _, sha = line.split()
        assert len(sha) == 64
        int(sha, 16)
    assert len(set(first)) == len(SEEDS)


def test_the_kernels_seeds_are_the_kernel_and_steps_surfaces() -> None:
    """By default only the seeds the kernel's scenario runs; `all_surfaces` keeps every one."""
    assert chosen_seeds(0, 4) == [0, 2, 3]
    assert chosen_seeds(0, 4, all_surfaces=True) == [0, 1, 2, 3]


def test_the_total_is_read_from_the_summary_or_totals_line(tmp_path: Path) -> None:
    out = tmp_path / "callgrind.out"
    out.write_text("events: Ir\nfn=(1) main\n16 5\nsummary: 1234567\ntotals: 1234567\n")
    assert callgrind_total(out) == 1234567
